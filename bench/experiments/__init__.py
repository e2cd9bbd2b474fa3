"""Answered experiments: each module measured one question once; its page under ``bench/results/`` stays.

Kept runnable (``python -m bench.experiments.NAME``) and importable, outside the suite: neither
``make bench`` nor the GPU recipe runs them, and no module of the suite imports one. One stays while
a figure on a current page measures something the product ships and would be measured again with it
(not a decision taken: its page keeps those figures); the others left the tree (their pages say where
git history keeps them). What each one answered is its results page's first lines;
``docs/benchmarks/index.md`` lists them.
"""
