"""Answered experiments: each module measured one question once; its page under ``bench/results/`` stays.

Kept runnable (``python -m bench.experiments.NAME``) and importable, outside the suite: neither
``make bench`` nor the GPU recipe runs them, and no module of the suite imports one. What each one
answered is its results page's first lines; ``docs/benchmarks/index.md`` lists them.
"""
