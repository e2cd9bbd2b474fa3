"""Nearest examples for a text: BM25 (``bm25s``) over a pool's texts. Pure apart from the index.

The index is built once per pool, when the catalog loads. A query scores every pool text
(a sparse dot product: well under a millisecond for 10,000 short texts, see
``bench/retrieval.py``) and takes the best in a deterministic order: score, then pool order.
The scores are bm25s's own, summed here from its index: its ``get_scores`` adds each query word's
postings with ``np.add.at``, which took a third of the pipeline's thread in the service on the H200
(py-spy, ``bench/results/raw/gpu-pyspy-http-skip.txt``), and one indexed add per query word still
took the most of reading a contract's worked examples (a passage is a query of thousands of words):
every word's postings are gathered and summed per document in one ``np.bincount``, in float64.
With ``diverse``, a candidate whose words mostly repeat an already chosen example's is passed
over, so three near-copies of one template do not crowd out the other patterns.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from extractor.grounding import has_unspaced, split_unspaced

_WORD = re.compile(r"\w+")
# Two texts whose word sets overlap this much (Jaccard) are near-duplicates.
NEAR_DUPLICATE = 0.8


def tokens(text: str) -> list[str]:
    """Lower-cased words; each character of an unspaced script (CJK, Thai...) is a word of its own."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = _WORD.findall(folded)
    if not has_unspaced(folded):  # the common case, without a Python step per word
        return words
    found: list[str] = []
    for word in words:
        found += split_unspaced(word)
    return found


# A passage read by field is a query of each field's pool in turn: its words are found once.
@functools.lru_cache(maxsize=256)
def _query(text: str) -> tuple[str, ...]:
    return tuple(tokens(text))


class Selector:
    """A BM25 index over ``texts``; :meth:`nearest` gives pool indices, best first."""

    def __init__(self, texts: Sequence[str]) -> None:
        # bm25s imports JAX when it is installed and runs a top-k at import; JAX then claims 75 % of
        # the GPU's memory in this process, and vLLM's engine core, started next, finds too little
        # free (seen on an H200). Only numpy scoring is used here: keep JAX on the CPU unless the
        # user chose a platform.
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import bm25s

        words = [tokens(t) for t in texts]
        self._sets = [frozenset(w) for w in words]
        self._size = len(texts)
        self._index: bm25s.BM25 | None = None
        self._postings: tuple[np.ndarray, np.ndarray, np.ndarray] = (
            np.zeros(0),
            np.zeros(0, dtype=np.int64),
            np.zeros(1, dtype=np.int64),
        )
        if self._size:
            self._index = bm25s.BM25()
            # Empty token lists would make bm25s drop rows (and shift indices): keep a placeholder.
            self._index.index([w or ["\x00"] for w in words], show_progress=False)
            index = self._index.scores
            self._postings = (index["data"], index["indices"], np.asarray(index["indptr"], dtype=np.int64))

    def __len__(self) -> int:
        return self._size

    def scores(self, text: str) -> np.ndarray:
        """BM25 score of every pool text against ``text`` (zeros when nothing is shared)."""
        if self._index is None:
            return np.zeros(0)
        vocabulary = self._index.vocab_dict
        query = [vocabulary[t] for t in _query(text) if t in vocabulary]
        if not query:
            return np.zeros(self._size)
        if self._index.nonoccurrence_array is not None:  # a BM25 variant with a score for absent words
            return np.asarray(self._index.get_scores_from_ids(query), dtype=np.float64)
        data, documents, starts = self._postings
        words = np.asarray(query, dtype=np.int64)
        first = starts[words]
        lengths = starts[words + 1] - first
        # every query word's postings, in query order, summed per document in one pass (a word said
        # twice counts twice, as in bm25s); the sums in float64, not bm25s's float32
        at = np.repeat(first - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
        return np.bincount(documents[at], weights=data[at], minlength=self._size)

    def nearest(self, text: str, k: int, *, diverse: bool = True) -> list[int]:
        """Indices of the ``k`` pool texts nearest to ``text``, best first.

        Equal scores keep pool order among the candidates considered (the best ``8k + 16``, then
        all); which of several texts tied at that cut is considered is fixed for a given pool.
        """
        if k <= 0 or not self._size:
            return []
        scores = self.scores(text)
        chosen: list[int] = []
        # The best few candidates first (argpartition: linear), the full order only when the
        # near-duplicate filter passes over all of them.
        width = min(self._size, 8 * k + 16)
        for order in (self._best(scores, w) for w in (width, self._size)):
            for index in order:
                if index in chosen:
                    continue
                if diverse and any(self._near(index, other) for other in chosen):
                    continue
                chosen.append(index)
                if len(chosen) == k:
                    return chosen
            if width == self._size:
                break
        return chosen

    @staticmethod
    def _best(scores: np.ndarray, width: int) -> list[int]:
        """The ``width`` best indices, by score then pool order (deterministic for a given pool)."""
        if width < len(scores):
            top = np.argpartition(-scores, width - 1)[:width]
            return [int(i) for i in top[np.lexsort((top, -scores[top]))]]
        return [int(i) for i in np.argsort(-scores, kind="stable")]

    def _near(self, a: int, b: int) -> bool:
        left, right = self._sets[a], self._sets[b]
        union = len(left | right)
        return union == 0 or len(left & right) / union >= NEAR_DUPLICATE
