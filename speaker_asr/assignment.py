"""One-to-one assignment, the one way every part of the project pairs two sets of labels: known
names to found voices (attribution/naming.py), a live session's final-pass speakers to its live
labels (live/final_pass.py), hypothesis to reference speakers in the evaluation
(testing/scoring.py, eval/). scipy's ``linear_sum_assignment`` (the Hungarian method) solves it.

Pure: numpy and scipy, no torch.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence, TypeVar

import numpy as np

A = TypeVar("A", bound=Hashable)
B = TypeVar("B", bound=Hashable)

# a pair not offered: never chosen (any offered pair, or leaving both unpaired, is better)
_FORBIDDEN = -1e12
# per pair made: among assignments of equal total score, the one that pairs more wins
_PER_PAIR = 1e-9


def best_pairs(scores: Mapping[tuple[A, B], float], rows: Sequence[A], cols: Sequence[B]) -> dict[A, B]:
    """``row -> col``, each row and each column at most once, only over the pairs ``scores``
    offers, maximising the total score; a row or a column may stay unpaired (so a pair of
    negative score is never made: leaving both unpaired scores 0). Among assignments of equal
    total, the one with more pairs. Deterministic for the same input order."""
    rows, cols = list(rows), list(cols)
    if not rows or not cols or not scores:
        return {}
    from scipy.optimize import linear_sum_assignment

    n, m = len(rows), len(cols)
    # rows x (cols + one "unpaired" column per row): leaving a row unpaired scores 0
    gain = np.full((n, m + n), _FORBIDDEN)
    gain[np.arange(n), m + np.arange(n)] = 0.0
    col_index = {c: j for j, c in enumerate(cols)}
    row_index = {r: i for i, r in enumerate(rows)}
    for (r, c), score in scores.items():
        if r in row_index and c in col_index:
            gain[row_index[r], col_index[c]] = float(score) + _PER_PAIR
    chosen_rows, chosen_cols = linear_sum_assignment(gain, maximize=True)
    return {rows[i]: cols[j] for i, j in zip(chosen_rows, chosen_cols)
            if j < m and gain[i, j] > _FORBIDDEN / 2}
