"""Worked examples: the task's fixed ones, and pools of labelled texts selected per request.

- :mod:`extractor.examples.pool`: ``examples/<task>.jsonl`` read and checked line by line;
- :mod:`extractor.examples.selection`: a BM25 index per pool, the nearest examples for a text;
- :mod:`extractor.examples.importing`: gold files (``expected`` per slot) turned into pools.
"""

from extractor.examples.pool import Example, ExamplePool, PoolSettings, load_pool
from extractor.examples.selection import Selector

__all__ = ["Example", "ExamplePool", "PoolSettings", "Selector", "load_pool"]
