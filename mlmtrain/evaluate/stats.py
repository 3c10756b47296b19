"""The 95 % intervals every judgement reports: of a proportion (Wilson), of Pearson's r (Fisher z), of a ratio of
sums over blocks (normal approximation), and of a mean over a few seeds (Student's t). Plain arithmetic."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

Z_95 = 1.96  # two-sided 95 % quantile of the normal distribution
# Student's t, two-sided 95 %, by degrees of freedom: a handful of seeds is too few for the normal 1.96
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
NO_INTERVAL = (float("nan"), float("nan"))


def wilson_interval(correct: int, total: int) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion (sound near 0 and 1, unlike the normal approximation)."""
    if total == 0:
        return NO_INTERVAL
    z, p = Z_95, correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (centre - half, centre + half)


def pearson_interval(r: float, n: int) -> tuple[float, float]:
    """95 % interval of Pearson's r over n pairs by Fisher's z; none for n <= 3 or an r that is undefined or +-1."""
    if not (n > 3 and math.isfinite(r) and abs(r) < 1):
        return NO_INTERVAL
    z, half = math.atanh(r), Z_95 / math.sqrt(n - 3)
    return (math.tanh(z - half), math.tanh(z + half))


def ratio_interval(numerators: np.ndarray, denominators: np.ndarray) -> tuple[float, float]:
    """95 % interval of sum(numerators) / sum(denominators) over k blocks (float64 arrays, every denominator > 0):
    the normal approximation of the ratio estimator; none for fewer than two blocks."""
    k = len(numerators)
    if k < 2:
        return NO_INTERVAL
    ratio = numerators.sum() / denominators.sum()
    residuals = (numerators - ratio * denominators) / denominators.mean()
    stderr = math.sqrt(float((residuals**2).sum()) / (k * (k - 1)))
    return (ratio - Z_95 * stderr, ratio + Z_95 * stderr)


def t_half_width(values: Sequence[float]) -> float:
    """Half width of the 95 % interval of the mean of a few values (t with n - 1 degrees of freedom, 1.96 beyond
    10); NaN for fewer than two."""
    if len(values) < 2:
        return float("nan")
    return T_975.get(len(values) - 1, Z_95) * statistics.stdev(values) / math.sqrt(len(values))
