"""Paired tests for the benchmark tables: the exact sign test and the paired t-test.

Both read differences ``arm - other`` per pair (a seed, or a target): lower is better in every table here, so
a negative difference is a pair the arm wins.

Example::

    >>> sign_test([-0.02, -0.01, -0.03, 0.01])
    (3, 1, 0.625)
    >>> round(paired_t([-0.02, -0.01, -0.03, -0.02])[1], 4)
    0.0163
"""
from __future__ import annotations

import math


def sign_test(differences) -> tuple[int, int, float]:
    """``(negative, positive, two-sided p)`` of the exact sign test (zero differences left out)."""
    lower = sum(d < 0 for d in differences)
    upper = sum(d > 0 for d in differences)
    n = lower + upper
    if n == 0:
        return 0, 0, 1.0
    tail = sum(math.comb(n, k) for k in range(min(lower, upper) + 1)) / 2 ** n
    return lower, upper, min(1.0, 2 * tail)


def paired_t(differences) -> tuple[float, float]:
    """``(t, two-sided p)`` of the paired t-test on ``differences`` (n - 1 degrees of freedom); ``(nan, nan)``
    below two pairs. Equal non-zero differences have no spread: ``t`` is infinite and ``p`` is 0."""
    from scipy.stats import t as student_t

    values = [float(d) for d in differences]
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    mean = sum(values) / n
    sample_std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    if sample_std == 0:
        return (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
    statistic = mean / (sample_std / math.sqrt(n))
    return statistic, float(2 * student_t.sf(abs(statistic), n - 1))
