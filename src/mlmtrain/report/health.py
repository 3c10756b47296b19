"""Health checks on a run: each reads the run's metrics (and its config and token store) and gives a
one-line verdict, with the fix when it fails. Thresholds are the `report` config section.

A check that lacks what it needs (an older run that did not log a figure, no evaluation yet) says so
and neither passes nor fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from mlmtrain.config import ReportConfig, apply_override, config_from_dict, parse_duration
from mlmtrain.errors import UserError
from mlmtrain.report.rundata import Run, Series

OK, FAIL, UNKNOWN = "ok", "FAIL", "n/a"
_NO_FIGURE = "no store found, or one written by an older mlmtrain"


@dataclass
class Verdict:
    check: str
    status: str  # OK, FAIL or UNKNOWN
    message: str
    fix: str = ""


def smooth(values: np.ndarray) -> np.ndarray:
    """Debiased exponential moving average whose span grows with the run (about 2 % of the points, at least 5)."""
    span = max(5.0, len(values) / 50)
    weight = 1.0 - 1.0 / span
    out = np.empty(len(values), dtype=np.float64)
    mean = norm = 0.0
    for i, value in enumerate(values):
        mean = weight * mean + (1.0 - weight) * value
        norm = weight * norm + (1.0 - weight)
        out[i] = mean / norm
    return out


_COUNTED = ("max_steps", "max_tokens", "max_time", "max_flops")  # a phase's budget: one of these


def _by_phase(run: Run, series: Series) -> list[Series]:
    """`series` cut at the run's phase boundaries (config phases:): a phase's masking, lengths and data set the level
    of its losses; the whole series for a run without phases."""
    if not run.phased:
        return [series]
    return [_part(series, phase.holds(series.step)) for phase in run.phases]


def _in_last_phase(run: Run, series: Series) -> Series:
    """The points of `series` in the run's last phase (all of them without phases)."""
    return _part(series, run.phases[-1].holds(series.step)) if run.phased else series


def _at_last_length(run: Run, series: Optional[Series]) -> Optional[Series]:
    """The finite evaluations of `series` at the block length of the last one (seq_len, logged with each; all where
    the run logged none): evaluations at other lengths are not comparable."""
    if series is None:
        return None
    finite, lengths = series.finite(), run.get("seq_len")
    if lengths is None or not len(finite):
        return finite
    at = np.interp(finite.step, lengths.step, lengths.value)  # each evaluation's line logs its length at its step
    return _part(finite, at == at[-1])


def _part(series: Series, keep: np.ndarray) -> Series:
    return Series(series.step[keep], series.tokens[keep], series.value[keep])


def limits_for(run: Run, overrides: dict[str, Any]) -> ReportConfig:
    """Thresholds: defaults, then the run's own `report` section, then the caller's overrides (--set report.X=Y)."""
    saved = run.config.get("report") if isinstance(run.config.get("report"), dict) else {}
    known = set(ReportConfig.__dataclass_fields__)
    merged = {k: v for k, v in saved.items() if k in known}  # a newer mlmtrain's keys are not ours to judge
    merged.update(overrides)
    return config_from_dict({"report": merged}).report


def _pct(share: float) -> str:
    return f"{share:.1%}"


# ---------------------------------------------------------------------------------------------
# The checks: (run, limits) -> Verdict


def check_data_bound(run: Run, limits: ReportConfig) -> Verdict:
    name = "data-bound"
    wait = run.get("data_wait_share")
    if wait is None or not len(wait.finite()):
        return Verdict(name, UNKNOWN, "the wait for data was not logged (data_wait_share; an older run)")
    shares = wait.finite().value
    share = float(np.mean(shares[1:] if len(shares) > 1 else shares))  # the first window holds the loader's start
    if share > limits.data_wait_share:
        return Verdict(
            name,
            FAIL,
            f"the loop waited for the next batch {_pct(share)} of the time (limit {_pct(limits.data_wait_share)})",
            "raise data.num_workers, tokenize once (data.use_store: true), or move the token store to a faster disk",
        )
    return Verdict(name, OK, f"the loop waited for data {_pct(share)} of the time")


def check_loss_spikes(run: Run, limits: ReportConfig) -> Verdict:
    name = "loss spikes"
    loss = run.get("loss")
    if loss is None:
        return Verdict(name, UNKNOWN, "no training loss logged yet")
    spikes = []
    for part in _by_phase(run, loss.finite()):  # a phase's masking, lengths and data set a level of its own
        values, steps = part.value, part.step
        # before[i] = the 20 values before line i (nan-padded at the start); judged from the 5th line on
        before = np.lib.stride_tricks.sliding_window_view(np.concatenate([np.full(20, np.nan), values]), 20)
        medians = np.nanmedian(before[5 : len(values)], axis=1) if len(values) > 5 else np.zeros(0)
        spikes += [int(s) for s in steps[5:][values[5:] > limits.spike_factor * medians]]
    if spikes:
        shown = ", ".join(str(s) for s in spikes[:5]) + (" ..." if len(spikes) > 5 else "")
        return Verdict(
            name,
            FAIL,
            f"{len(spikes)} logged loss(es) above {limits.spike_factor}x the median before them (step {shown})",
            "lower optim.lr or lengthen optim.warmup_steps; keep optim.grad_clip > 0",
        )
    return Verdict(name, OK, f"no logged loss above {limits.spike_factor}x the median before it")


def check_nonfinite(run: Run, limits: ReportConfig) -> Verdict:
    name = "non-finite steps"
    skipped = run.get("nonfinite_skipped")  # the loop's running count of skipped steps
    # from the finite counts only: a count of nan or inf (a metrics line garbled by hand) has no integer value; it
    # is reported below as a non-finite value like any other
    counts = skipped.finite().value if skipped is not None else np.zeros(0)
    count = int(counts.max()) if len(counts) else 0
    logged = {
        key: int((~np.isfinite(run.series[key].value)).sum())
        for key in ("loss", "grad_norm", "eval_loss", "nonfinite_skipped")
        if key in run.series
    }
    logged = {key: n for key, n in logged.items() if n}
    if count > limits.nonfinite_steps or logged:
        parts = [f"{count} step(s) skipped for a non-finite loss or gradient"] if count else []
        parts += [f"{n} non-finite {key} value(s)" for key, n in logged.items()]
        return Verdict(
            name,
            FAIL,
            "; ".join(parts),
            "lower optim.lr, keep optim.grad_clip > 0, or use train.precision bf16 or fp32 instead of fp16",
        )
    if skipped is None and "loss" not in run.series:
        return Verdict(name, UNKNOWN, "no training lines logged yet")
    return Verdict(name, OK, f"{count} skipped step(s), no non-finite value logged")


def check_divergence(run: Run, limits: ReportConfig) -> Verdict:
    name = "divergence"
    loss = run.get("loss")
    losses = _in_last_phase(run, loss.finite()) if loss is not None else None
    if losses is None or len(losses) < 2:
        return Verdict(name, UNKNOWN, "too few training losses logged to judge")
    smoothed = smooth(losses.value)
    low, last = float(smoothed.min()), float(smoothed[-1])
    if last > limits.divergence_factor * low:
        return Verdict(
            name,
            FAIL,
            f"the smoothed loss rose to {last:.3f} from its minimum {low:.3f} (more than {limits.divergence_factor}x)",
            "lower optim.lr, keep optim.grad_clip > 0, and resume from a checkpoint before the rise",
        )
    within = f" in phase {run.phases[-1].name}" if run.phased else ""
    return Verdict(name, OK, f"smoothed loss {last:.3f}, minimum {low:.3f}{within}")


def check_plateau(run: Run, limits: ReportConfig) -> Verdict:
    name = "plateau"
    evals = _at_last_length(run, run.get("eval_loss"))
    k = limits.plateau_evals
    if evals is None or len(evals) <= k:
        got = len(evals) if evals is not None else 0
        return Verdict(name, UNKNOWN, f"needs more than {k} validation evaluations (has {got})")
    values = evals.value
    best_before, best_recent = float(values[:-k].min()), float(values[-k:].min())
    if best_recent < best_before * (1 - 1e-3):
        return Verdict(name, OK, f"validation loss improved to {best_recent:.4f} within the last {k} evaluations")
    lr = run.get("lr")
    if lr is None or not len(lr.finite()):
        return Verdict(name, UNKNOWN, f"no new best validation loss in {k} evaluations, but lr was not logged")
    lr_values = lr.finite().value
    share = float(lr_values[-1] / max(float(lr_values.max()), 1e-30))
    if share > limits.plateau_lr_share:
        return Verdict(
            name,
            FAIL,
            f"no new best validation loss in the last {k} evaluations while lr is still {_pct(share)} of its peak",
            "lower optim.lr, use more (or more varied) data, or stop earlier (train.max_steps)",
        )
    return Verdict(name, OK, f"validation loss flat over {k} evaluations, with lr down to {_pct(share)} of its peak")


def _train_tokens(run: Run) -> Optional[int]:
    train = (run.store or {}).get("splits", {}).get("train", {})
    return int(train["tokens"]) if train.get("tokens") else None


def check_overfitting(run: Run, limits: ReportConfig) -> Verdict:
    name = "overfitting"
    corpus = _train_tokens(run)
    if corpus is None:
        return Verdict(name, UNKNOWN, "the token store was not found (a live stream, or a moved store)")
    epochs = run.last_tokens() / corpus
    evals, loss = run.get("eval_loss"), run.get("loss")
    if epochs < limits.overfit_epochs:
        return Verdict(name, OK, f"{epochs:.2f} passes over {corpus:,} training tokens")
    # a phase's masking and lengths set the level of both losses: the gap is compared within the last phase
    evals, loss = (_in_last_phase(run, series.finite()) if series is not None else None for series in (evals, loss))
    if evals is None or loss is None or len(evals) < 2 or not len(loss):
        return Verdict(name, UNKNOWN, f"{epochs:.1f} passes over the data, but too few evaluations to compare")
    train = loss
    gap = evals.value - np.interp(evals.step, train.step, smooth(train.value))
    growth = float(gap[-1] - gap.min())
    best = int(np.argmin(evals.value))
    rose = float(evals.value[-1] - evals.value[best])
    if growth > limits.overfit_gap and rose > 0:  # a gap that grows while validation still improves is not harm yet
        best_step = int(evals.step[best])
        said = (
            f"{epochs:.1f} passes over {corpus:,} tokens, (validation - training loss) grew by {growth:.3f} nats and "
            f"the validation loss rose by {rose:.3f} from its best, at step {best_step:,}"
        )
        if run.setting("checkpoint", "keep_best") is True and best_step in run.checkpoints:
            # the fix is in place: the run kept the checkpoint of its best validation loss
            return Verdict(name, OK, f"{said}, whose checkpoint the run kept: checkpoints/step-{best_step}")
        return Verdict(name, FAIL, said, _overfit_fix(run))
    if growth > limits.overfit_gap:
        return Verdict(
            name,
            OK,
            f"{epochs:.1f} passes over the data; the validation gap grew by {growth:.3f} nats, but the validation "
            "loss is still at its best",
        )
    return Verdict(name, OK, f"{epochs:.1f} passes over the data; the validation gap grew by only {growth:.3f} nats")


def _overfit_fix(run: Run) -> str:
    if run.setting("checkpoint", "keep_best") is not True:
        return "train on more data, keep the best checkpoint (checkpoint.keep_best: true), or raise model.dropout"
    # keep_best ranks the saved checkpoints: a best evaluation between saves was never written
    return (
        "train on more data, raise model.dropout, or save at each evaluation (checkpoint.save_every = train.eval_every)"
    )


def _split(run: Run, split: str, key: str) -> Optional[dict[str, Any]]:
    found = (run.store or {}).get("splits", {}).get(split, {})
    return found if key in found and found.get("tokens") else None


def check_unk_rate(run: Run, limits: ReportConfig) -> Verdict:
    name = "unknown tokens"
    valid = _split(run, "validation", "unk_tokens")
    if valid is None:
        return Verdict(name, UNKNOWN, f"the token store holds no [UNK] count ({_NO_FIGURE})")
    rate = valid["unk_tokens"] / valid["tokens"]
    if rate > limits.unk_rate:
        return Verdict(
            name,
            FAIL,
            f"{rate:.2%} of the validation tokens are [UNK] (limit {limits.unk_rate:.2%})",
            "train the tokenizer on this corpus (drop tokenizer.pretrained) or raise tokenizer.limit_alphabet",
        )
    return Verdict(name, OK, f"{rate:.3%} of the validation tokens are [UNK]")


def check_tokens_per_word(run: Run, limits: ReportConfig) -> Verdict:
    name = "tokens per word"
    valid = _split(run, "validation", "words")
    if valid is None or not valid["words"]:
        return Verdict(name, UNKNOWN, f"the token store holds no word count ({_NO_FIGURE})")
    ratio = (valid["tokens"] - valid["documents"]) / valid["words"]  # each document ends in one [SEP]
    if ratio > limits.tokens_per_word:
        return Verdict(
            name,
            FAIL,
            f"{ratio:.2f} WordPiece tokens per word (limit {limits.tokens_per_word})",
            "raise tokenizer.vocab_size, or train the tokenizer on text like this corpus",
        )
    return Verdict(name, OK, f"{ratio:.2f} WordPiece tokens per word")


def check_duplicates(run: Run, limits: ReportConfig) -> Verdict:
    name = "duplicate documents"
    train = _split(run, "train", "duplicates")
    if train is None:
        return Verdict(name, UNKNOWN, f"the token store holds no duplicate count ({_NO_FIGURE})")
    share = train["duplicates"] / max(train["documents"], 1)
    if share > limits.duplicate_share:
        return Verdict(
            name,
            FAIL,
            f"{_pct(share)} of the training documents repeat an earlier one (limit {_pct(limits.duplicate_share)})",
            "deduplicate the training corpus: repeated documents are memorised, not learned from",
        )
    return Verdict(name, OK, f"{_pct(share)} of the training documents are exact duplicates")


def _tokens_per_step(run: Run) -> Optional[float]:
    loss = run.get("loss")
    if loss is None or not np.isfinite(loss.tokens[-1]) or loss.step[-1] <= 0:
        return None
    return float(loss.tokens[-1] / loss.step[-1])


def _flops_per_step(run: Run) -> Optional[float]:
    flops = run.get("flops")
    if flops is None or not np.isfinite(flops.value[-1]) or flops.step[-1] <= 0:
        return None
    return float(flops.value[-1] / flops.step[-1])


def _planned_steps(run: Run) -> Optional[float]:
    """The run's length in steps: max_steps, or what max_tokens (max_flops) comes to at the logged tokens (FLOPs)
    per step; with phases, the sum of theirs (`_planned`)."""
    if _phase_budgets(run):
        planned = _planned(run)
        return planned[0] if planned is not None else None
    steps, tokens = run.number("train", "max_steps"), run.number("train", "max_tokens")
    per_step = _tokens_per_step(run)
    candidates = [float(steps)] if steps else []
    if tokens and per_step:
        candidates.append(tokens / per_step)
    flops, flops_per_step = run.number("train", "max_flops"), _flops_per_step(run)
    if flops and flops_per_step:
        candidates.append(flops / flops_per_step)
    return min(candidates) if candidates else None  # the first budget reached ends the run


def _phase_budgets(run: Run) -> list[tuple[str, str, float]]:
    """(name, budget key, amount in steps, tokens, seconds or FLOPs) of each phase of the run's config; [] without
    phases, or where one is unreadable (a damaged mlmtrain.yaml)."""
    budgets = []
    for phase in run.config.get("phases") if isinstance(run.config.get("phases"), list) else []:
        found = [key for key in _COUNTED if isinstance(phase, dict) and phase.get(key) is not None]
        if len(found) != 1:
            return []
        try:
            amount = parse_duration(phase[found[0]]) if found[0] == "max_time" else float(phase[found[0]])
        except (UserError, TypeError, ValueError):
            return []
        budgets.append((str(phase.get("name")), found[0], amount))
    return budgets


def _planned(run: Run) -> Optional[tuple[float, float]]:
    """(steps, tokens) the run plans: with phases, each phase's budget at its logged tokens per step (the run's,
    before it has lines); None when a budget is a time, or no rate is logged yet to turn it into steps."""
    budgets, per_step, flops_per_step = _phase_budgets(run), _tokens_per_step(run), _flops_per_step(run)
    if not budgets:
        steps = _planned_steps(run)
        return (steps, steps * per_step) if steps is not None and per_step is not None else None
    logged = {phase.name: phase for phase in run.phases if phase.steps > 0}
    steps = tokens = 0.0
    for name, key, amount in budgets:
        rate = logged[name].tokens / logged[name].steps if name in logged else per_step
        if key == "max_time" or not rate or (key == "max_flops" and not flops_per_step):
            return None
        phase_steps = {"max_steps": amount, "max_tokens": amount / rate}.get(key) or amount / flops_per_step
        steps, tokens = steps + phase_steps, tokens + phase_steps * rate
    return steps, tokens


def check_tokens_per_parameter(run: Run, limits: ReportConfig) -> Verdict:
    name = "tokens per parameter"
    base = run.setting("model", "init_from")
    if base:  # continued pretraining: the model's budget was spent on the base, this run adapts it
        return Verdict(name, UNKNOWN, f"the run continues {base} (model.init_from), which was pretrained already")
    if not run.parameters:
        return Verdict(name, UNKNOWN, "the model size is unknown until the first checkpoint")
    planned = _planned(run)
    if planned is not None:
        tokens, what = planned[1], "the run plans"
    elif run.last_tokens() > 0:
        tokens, what = run.last_tokens(), "the run has seen"
    else:  # nothing logged yet: no count to judge, not a count of zero
        return Verdict(name, UNKNOWN, "no token count logged yet")
    ratio = tokens / run.parameters
    longer = "the phases' max_steps or max_tokens" if _phase_budgets(run) else "train.max_steps or train.max_tokens"
    if ratio < limits.tokens_per_param:
        return Verdict(
            name,
            FAIL,
            f"{what} {tokens:,.0f} tokens for {run.parameters:,} parameters: {ratio:.2f} per parameter "
            f"(fewest {limits.tokens_per_param:g})",
            f"train longer ({longer}) or choose a smaller model (model.hidden_size, model.num_layers)",
        )
    return Verdict(name, OK, f"{what} {ratio:,.1f} tokens per parameter")


def _check_one_cycle(run: Run, limits: ReportConfig) -> Verdict:
    """One-cycle ignores optim.warmup_steps: its learning rate rises over the first optim.cycle_peak of the budget."""
    name, peak = "warm-up", run.number("optim", "cycle_peak")
    if peak is None:
        return Verdict(name, UNKNOWN, "a one-cycle run whose optim.cycle_peak is not in mlmtrain.yaml")
    if peak > limits.warmup_share:
        return Verdict(
            name,
            FAIL,
            f"the one-cycle learning rate rises over {_pct(peak)} of the run (optim.cycle_peak {peak:g}, limit "
            f"{_pct(limits.warmup_share)})",
            "lower optim.cycle_peak (0.3 to 0.5 is usual)",
        )
    return Verdict(name, OK, f"the one-cycle learning rate rises over {_pct(peak)} of the run (optim.cycle_peak)")


def _budget_limits(run: Run) -> dict[str, float]:
    """The budgets the run's config sets, by key (max_steps, max_tokens, max_time in seconds, max_flops)."""
    limits = {key: run.number("train", key) for key in ("max_steps", "max_tokens", "max_flops")}
    try:
        limits["max_time"] = parse_duration(run.setting("train", "max_time"))
    except UserError:  # a damaged mlmtrain.yaml: no time budget to judge by
        limits["max_time"] = None
    return {key: limit for key, limit in limits.items() if limit}


def _budget_spent(run: Run) -> bool:
    """Whether the last logged line reached a budget of the run's config (with phases, the last phase's): the run
    ended there, not in the middle."""
    budgets = _phase_budgets(run)
    if budgets:
        name, key, amount = budgets[-1]
        last = run.phases[-1] if run.phases else None
        if last is None or last.name != name:
            return False
        steps = np.array([last.start_step, last.end_step], dtype=np.float64)
        counted = {"max_steps": steps, "max_tokens": np.array([last.start_tokens, last.end_tokens])}
        used = counted.get(key, run.interpolated("flops" if key == "max_flops" else "elapsed_s", steps))
        return used is not None and float(used[1] - used[0]) >= amount * 0.99
    elapsed, flops = run.get("elapsed_s"), run.get("flops")
    used = {
        "max_steps": run.last_step(),
        "max_tokens": run.last_tokens(),
        "max_time": float(elapsed.value[-1]) if elapsed is not None else 0.0,
        "max_flops": float(flops.value[-1]) if flops is not None else 0.0,
    }
    return any(used[key] >= limit * 0.99 for key, limit in _budget_limits(run).items())


def check_warmup(run: Run, limits: ReportConfig) -> Verdict:
    name = "warm-up"
    if run.setting("optim", "schedule") == "one-cycle":
        return _check_one_cycle(run, limits)
    warmup, planned = run.number("optim", "warmup_steps"), _planned_steps(run)
    # warm-up counts steps unless max_steps stands beside another budget (then it is a share: model.optim.warmup_share)
    counts_steps = not (run.number("train", "max_steps") and len(_budget_limits(run)) > 1)
    if warmup and counts_steps and run.last_step() < warmup and _budget_spent(run):
        return Verdict(
            name,
            FAIL,
            f"the run ended at step {run.last_step():,}, inside its warm-up of {warmup:,.0f} steps: the learning rate "
            "never reached optim.lr",
            "lower optim.warmup_steps, or set train.max_steps beside train.max_time so that warm-up is its share of "
            "the budget",
        )
    if warmup is None or planned is None:
        return Verdict(name, UNKNOWN, "the run's length or warm-up is unknown (no mlmtrain.yaml, or a time budget)")
    share = warmup / max(planned, 1.0)
    if share > limits.warmup_share:
        return Verdict(
            name,
            FAIL,
            f"warm-up takes {warmup:,.0f} of the run's {planned:,.0f} steps ({_pct(share)}, limit "
            f"{_pct(limits.warmup_share)})",
            "lower optim.warmup_steps (a few percent of the run is usual) or train longer",
        )
    return Verdict(name, OK, f"warm-up takes {warmup:,.0f} of {planned:,.0f} steps ({_pct(share)})")


CHECKS: tuple[Callable[[Run, ReportConfig], Verdict], ...] = (
    check_data_bound,
    check_loss_spikes,
    check_nonfinite,
    check_divergence,
    check_plateau,
    check_overfitting,
    check_unk_rate,
    check_tokens_per_word,
    check_duplicates,
    check_tokens_per_parameter,
    check_warmup,
)


def run_checks(run: Run, overrides: Optional[dict[str, Any]] = None) -> list[Verdict]:
    """Every check on one run, under its thresholds (see `limits_for`)."""
    limits = limits_for(run, overrides or {})
    return [check(run, limits) for check in CHECKS]


def parse_overrides(assignments: list[str]) -> dict[str, Any]:
    """{"data_wait_share": 0.2} from ["report.data_wait_share=0.2"]; the values are checked by `limits_for`."""
    tree: dict[str, Any] = {}
    for assignment in assignments:
        apply_override(tree, assignment)
    if set(tree) - {"report"}:
        raise UserError(
            "argument", "report takes thresholds only: --set report.KEY=VALUE (see `mlmtrain config fields`)"
        )
    return tree.get("report", {})
