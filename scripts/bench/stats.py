"""The arithmetic every section shares: steady-state tokens/s, time to a target perplexity, perplexity at the same
step, and a mean with its 95 % interval over seeds."""

from __future__ import annotations

import statistics
from typing import Any, Optional

from bench.setup import BenchmarkError
from mlmtrain.evaluate.stats import t_half_width


def steady_tokens_per_s(points: list[tuple[int, float]], warmup_steps: int) -> float:
    """(tokens_n - tokens_k) / (t_n - t_k) over per-step (cumulative tokens, end time): k = warmup_steps, n = last."""
    if len(points) <= warmup_steps:
        raise BenchmarkError(f"only {len(points)} steps were timed; need more than --warmup-steps={warmup_steps}")
    (tokens_k, time_k), (tokens_n, time_n) = points[warmup_steps - 1], points[-1]
    return (tokens_n - tokens_k) / max(time_n - time_k, 1e-9)


def spread(values: list[float]) -> dict[str, Any]:
    return {"values": values, "median": statistics.median(values), "min": min(values), "max": max(values)}


def time_to_target(evals: list[dict[str, float]], target: float) -> Optional[float]:
    """Training seconds at which perplexity first reaches `target`: linear between the evaluations around it."""
    previous = None
    for point in evals:
        if point["eval_ppl"] <= target:
            if previous is None:  # already there at the first evaluation: its time is an upper bound
                return point["train_seconds"]
            t0, p0, t1, p1 = previous["train_seconds"], previous["eval_ppl"], point["train_seconds"], point["eval_ppl"]
            return t0 + (t1 - t0) * (p0 - target) / (p0 - p1)
        previous = point
    return None


def same_step(ours: list[dict], hf: list[dict]) -> Optional[dict[str, Any]]:
    """Perplexity of both at the last step both evaluated (issue 4: after the same number of steps)."""
    hf_by_step = {point["step"]: point["eval_ppl"] for point in hf}
    common = [point for point in ours if point["step"] in hf_by_step]
    if not common:
        return None
    last = common[-1]
    return {"step": last["step"], "ours_ppl": last["eval_ppl"], "hf_ppl": hf_by_step[last["step"]]}


def mean_interval(values: list[float]) -> dict[str, Any]:
    """Mean and 95 % interval over seeds (Student's t, `t_half_width`; none for one value)."""
    mean, half = statistics.fmean(values), t_half_width(values)
    interval = [mean - half, mean + half] if len(values) >= 2 else None
    return {"values": values, "mean": mean, "ci95": interval, "half_width": half}
