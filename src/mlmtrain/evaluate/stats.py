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


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz's method)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast below this point: use the symmetry there
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * result


def t_quantile(probability: float, df: float) -> float:
    """The `probability` quantile (above 0.5) of Student's t with `df` degrees of freedom, by bisection on its
    distribution function: P(T <= t) = 1 - I_{df / (df + t^2)}(df / 2, 1 / 2) / 2."""
    low, high = 0.0, 1.0
    while 1.0 - 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + high * high)) < probability:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if 1.0 - 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + middle * middle)) < probability:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def t_half_width(values: Sequence[float]) -> float:
    """Half width of the 95 % interval of the mean of a few values (Student's t with n - 1 degrees of freedom);
    NaN for fewer than two."""
    if len(values) < 2:
        return float("nan")
    return t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
