"""The 95 % intervals against published values and independent computations."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from mlmtrain.evaluate.stats import pearson_interval, ratio_interval, t_half_width, t_quantile, wilson_interval


def test_wilson_interval_matches_published_values() -> None:
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    low, high = wilson_interval(0, 10)  # sound at 0, where the normal approximation collapses to a point
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.2775, abs=1e-4)
    assert all(math.isnan(end) for end in wilson_interval(0, 0))


def test_pearson_interval_by_fisher_z() -> None:
    assert pearson_interval(0.5, 28) == pytest.approx((0.1560, 0.7358), abs=1e-4)  # tanh(0.5493 -+ 1.96 / 5)
    for r, n in ((0.5, 3), (1.0, 50), (-1.0, 50), (float("nan"), 50)):
        assert all(math.isnan(end) for end in pearson_interval(r, n))


def test_ratio_interval_of_equal_blocks_is_the_interval_of_their_mean() -> None:
    """With equal denominators the ratio is the mean of the per-block ratios, and its standard error theirs."""
    numerators, denominators = np.array([3.0, 5.0, 4.0, 6.0, 2.0]), np.full(5, 2.0)
    per_block = list(numerators / denominators)
    half = 1.96 * statistics.stdev(per_block) / math.sqrt(len(per_block))
    mean = statistics.fmean(per_block)
    assert ratio_interval(numerators, denominators) == pytest.approx((mean - half, mean + half))
    assert all(math.isnan(end) for end in ratio_interval(numerators[:1], denominators[:1]))


@pytest.mark.parametrize(
    ("df", "published"), [(1, 12.7062), (2, 4.3027), (5, 2.5706), (11, 2.2010), (30, 2.0423), (100, 1.9840)]
)
def test_t_quantile_matches_published_tables(df: int, published: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(published, abs=5e-5)


def test_t_half_width_uses_students_t_for_every_count() -> None:
    assert t_half_width([0.5, 0.6, 0.7]) == pytest.approx(4.3027 * 0.1 / math.sqrt(3), rel=1e-4)
    many = [float(i) for i in range(12)]  # 11 degrees of freedom: 2.201, not the normal 1.96
    assert t_half_width(many) == pytest.approx(2.2010 * statistics.stdev(many) / math.sqrt(12), rel=1e-4)
    assert math.isnan(t_half_width([0.5]))
