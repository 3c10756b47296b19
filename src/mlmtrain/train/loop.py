"""`pretrain(cfg)`: resolve the run once (`resolved.py`), lock the run folder and check that the run can start, only
then write (--overwrite's removal, a branch's tokenizer, tokenizing if needed), build the training setup, run the loop.

Read `Loop.run` top to bottom: fetch the step's micro-batches, `train_step` (step.py), then log, evaluate and
checkpoint on their cadence. Rank 0 alone writes; every collective is taken by every rank in the same order.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from mlmtrain.config import Config, save_config, yaml_value
from mlmtrain.data.blocks import evaluation_blocks
from mlmtrain.data.masking import scheduled_rate
from mlmtrain.data.sources import corpus_splits
from mlmtrain.data.store import TokenStore, fetch_remote_copies, prepare_tokenizer, tokenize_corpus
from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_fingerprint
from mlmtrain.errors import UserError, first_line, interrupt_on_sigterm, loader_worker_died
from mlmtrain.evaluate.probe import LiveProbe, ProbeDiverged, Task, live_task, metric_record
from mlmtrain.report.page import LiveReport
from mlmtrain.runtime.distributed import DistContext, gather_objects, init_distributed, on_main, peer_lost, teardown
from mlmtrain.runtime.files import write_failure
from mlmtrain.runtime.progress import Reporter, say
from mlmtrain.runtime.trackers import check_trackers
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train import ema, ownership
from mlmtrain.train.added_words import write_added_words
from mlmtrain.train.base_model import KEY as BASE_KEY
from mlmtrain.train.base_model import kept_pooler
from mlmtrain.train.branch import take_branch_tokenizer
from mlmtrain.train.compiling import compile_failure, reproducible_compile
from mlmtrain.train.guard import RunLock, StopRequested, check_before_start, check_run_folder, remove_old_run
from mlmtrain.train.init_from import second_phase_note
from mlmtrain.train.objectives import Evaluation, Objective
from mlmtrain.train.plan import RateMeter, forecast
from mlmtrain.train.resolved import ResolvedRun, resolve_run
from mlmtrain.train.step import (
    StepResult,
    TrainingSetup,
    build_setup,
    enter_phase,
    mixture_targets,
    stream_step,
    train_step,
)


def pretrain(
    cfg: Config, resume: Optional[str] = None, overwrite: bool = False, branch_from: Optional[str] = None
) -> Path:
    """`mlmtrain pretrain`: returns the folder of the final checkpoint. `branch_from` (a checkpoint of another run)
    starts a new run in train.run_dir from that checkpoint's whole training state (branch.py)."""
    if resume is not None and overwrite:
        raise UserError(
            "argument", "--resume and --overwrite contradict each other (--overwrite deletes the run); drop one"
        )
    run = resolve_run(cfg, resume, branch_from)  # once, before any write: a mistyped folder or a bad base fails now
    ctx = init_distributed(cfg.train.device)
    try:
        return _pretrain(run, ctx, overwrite)
    finally:
        teardown(ctx)


def _pretrain(run: ResolvedRun, ctx: DistContext, overwrite: bool) -> Path:
    cfg, run_dir = run.cfg, run.run_dir
    # Rank 0 alone locks, checks and tokenizes; on_main shares its verdict, so a refusal stops every rank at once.
    on_main(ctx, lambda: check_trackers(cfg.train.active_trackers, cfg.train.tensorboard))  # before any work
    task = on_main(ctx, lambda: live_task(cfg.probe))  # a bad probe task fails before anything is written
    lock = on_main(ctx, lambda: RunLock(run_dir))
    try:
        removes = on_main(ctx, lambda: check_run_folder(run_dir, run.resume, overwrite, cfg))
        on_main(ctx, lambda: check_before_start(run, ctx.device))
        note = on_main(ctx, lambda: second_phase_note(cfg, run.continued))
        # every check has passed: from here on the run writes (--overwrite removes the old run first)
        if removes:
            on_main(ctx, lambda: remove_old_run(run_dir))
        if run.branched:  # the weights' own tokenizer, where the new run would otherwise train one
            on_main(ctx, lambda: take_branch_tokenizer(cfg, run.resume_from))
        for line in (*run.notes, note) if ctx.is_main else ():
            if line:
                say(line)
        with interrupt_on_sigterm():  # tokenizing and set-up: SIGTERM says "interrupted" like Ctrl-C
            _ensure_data(cfg, run.resumed_base, ctx)
            if ctx.is_main and run.resume == "auto" and run.start is None:
                say(f"no checkpoint in {run_dir}; starting a new run")
            return _run(run, ctx, task)
    except RuntimeError as error:
        failed = compile_failure(error)
        if failed is not None:  # e.g. a C++ compiler found but unable to build: the fix is to train without compile
            latest = ownership.latest_checkpoint(run_dir)
            kept = f"; the last complete checkpoint is {latest}" if latest else ""
            raise UserError(
                "compile", f"torch.compile could not compile the model ({failed}); set train.compile: false{kept}"
            ) from error  # mlmtrain --debug shows the compiler's whole story
        if not (loader_worker_died(error) or (ctx.distributed and peer_lost(error))):
            raise
        raise _stopped_from_outside(error, run_dir) from error
    finally:
        if lock is not None:
            lock.release()


def _stopped_from_outside(error: RuntimeError, run_dir: Path) -> UserError:
    """One line for a run stopped by a process it depends on: a dead DataLoader worker, or another process of the
    torchrun job gone (killed, out of memory), which the survivors learn as a broken connection in a collective."""
    latest = ownership.latest_checkpoint(run_dir)
    kept = f" (the last complete checkpoint is {latest})" if latest else ""
    if loader_worker_died(error):
        return UserError(
            "data",
            f"{first_line(error).rstrip('.')}; the kernel's out-of-memory killer is the usual cause: lower "
            f"data.num_workers or free memory, then resume with --resume{kept}",
        )
    return UserError(
        "distributed",
        "another process of this job stopped (its connection was lost); torchrun's summary names it and its own "
        "output says why (killed, out of memory); resume with torchrun <same options> -m mlmtrain pretrain "
        f"--config {run_dir / 'mlmtrain.yaml'} --resume{kept}",
    )


def _ensure_data(cfg: Config, tokenizer_source: Optional[Path], ctx: DistContext) -> None:
    """Tokenize first when the store is missing or stale, so one command does the whole job: rank 0 prepares the
    tokenizer and writes the store, every rank encodes its share (data/shares.py); then each machine holds its copy
    of a remote store and tokenizer. `tokenizer_source` (a resumed checkpoint) stands in for tokenizer.pretrained."""
    if cfg.data.use_store:
        tokenize_corpus(cfg, tokenizer_source=tokenizer_source, ctx=ctx)
    else:
        on_main(ctx, lambda: prepare_tokenizer(cfg, corpus_splits(cfg.data)[0], tokenizer_source))
    fetch_remote_copies(cfg)


def eval_set(objective: Objective, store: Path, tokenizer: Any, max_blocks: int) -> Optional[tuple[Any, list[int]]]:
    """Validation blocks for training-time evaluation (None when the validation split has no full block)."""
    try:  # packed blocks, or the pair objectives' fixed pairs of the validation documents
        blocks = objective.validation_blocks(TokenStore(store, "validation"), tokenizer)
    except UserError as error:
        say(f"evaluation disabled: {error.message}")
        return None
    return blocks, evaluation_blocks(blocks, max_blocks)


def _run(run: ResolvedRun, ctx: DistContext, task: Optional[Task]) -> Path:
    cfg, run_dir, resume_from = run.cfg, run.run_dir, run.resume_from
    tokenizer = run.tokenizer if run.tokenizer is not None else load_tokenizer(cfg.tokenizer_dir)
    objective = run.objective_with(tokenizer)
    setup = build_setup(cfg, ctx, run.start, tokenizer, objective, run.branched)
    if resume_from is not None and setup.budget.finished(setup.state):  # nothing left: write nothing
        if ctx.is_main:
            spent = setup.budget.spent(setup.state)
            further = (
                "raise the last phase's budget, or add a phase, in the config"
                if cfg.phases
                else "raise that budget with --set"
            )
            say(
                f"{resume_from} (step {setup.state.step}) has already spent the run's budget ({', '.join(spent)}); "
                f"nothing to train: {further} to train further"
            )
        return resume_from
    # evaluations and probes as the state's phase sets them (its blocks' length; a run without phases: the run's)
    phase = setup.cfg
    evaluates = ctx.is_main and any(c.train.eval_every for c in setup.budget.configs) and cfg.data.use_store
    validation = eval_set(setup.objective, cfg.store_dir, tokenizer, phase.train.eval_max_blocks) if evaluates else None
    probe = LiveProbe(phase.probe, task, setup.tokenizer, ctx.device, cfg.train.seed) if task else None
    if ctx.is_main:
        _announce(setup, run_dir, resume_from, run.branched)
    if resume_from is not None and not run.branched:
        on_main(ctx, lambda: _set_aside_later(run_dir, setup.state.step, resume_from))
    pooler = kept_pooler(run.bases.get(BASE_KEY)) if ctx.is_main else None  # rank 0 alone saves
    with reproducible_compile(setup.compiled.on, ctx.device):
        return Loop(setup, run_dir, validation, probe, pooler).run()


def _set_aside_later(run_dir: Path, step: int, resumed: Path) -> None:
    """A run resumed from an older checkpoint: the earlier run's later checkpoints go into a folder of their own."""
    moved = ownership.set_aside_later(run_dir, step, resumed)
    if moved is not None:
        folder, names = moved
        say(
            f"note: moved {', '.join(names)} (an earlier run's steps past step {step}, where this run resumes) to "
            f"{folder}, so that --resume and checkpoint.keep_last follow this run; delete that folder if unneeded"
        )


def _announce(setup: TrainingSetup, run_dir: Path, resume_from: Optional[Path], branched: bool) -> None:
    """Rank 0: the resolved config (the run's, its phases in it) and run facts into run_dir, and the start line (of
    the phase the run starts in)."""
    cfg, ctx, layout = setup.cfg, setup.ctx, setup.layout
    facts = {
        "tokenizer_fingerprint": tokenizer_fingerprint(setup.tokenizer),
        "world_size": ctx.world_size,
        "curves": [curve.record() for curve in setup.objective.curves],  # what the report draws of its own metrics
    }
    budget = setup.budget
    targets = {budget.name_of_phase(index): mixture_targets(config) for index, config in enumerate(budget.configs)}
    if any(targets.values()):  # a data mixture's target shares, by phase ("" for a run without phases)
        facts["mixture"] = {phase: shares for phase, shares in targets.items() if shares}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(setup.budget.cfg, run_dir)
        (run_dir / "run.json").write_text(json.dumps(facts, indent=1))
        write_added_words(cfg, run_dir)
    except OSError as error:  # a full disk or a quota, met before the first step
        raise UserError(
            "run",
            f"could not write the run's config in {run_dir}: {write_failure(error, run_dir)}; "
            "free disk space or fix permissions, then run again",
        ) from error
    params = sum(p.numel() for p in setup.mlm.parameters())
    say(
        f"pretrain: {params / 1e6:.1f}M parameters on {ctx.device} ({setup.precision.describe()}), "
        f"{ctx.world_size} process(es), global batch {layout.global_batch} x {cfg.data.seq_len} tokens "
        f"(micro-batch {layout.micro_batch_size}, accumulation {layout.accum_steps})"
        + (
            f", {'branching' if branched else 'resuming'} from {resume_from} at step {setup.state.step}"
            if resume_from
            else ""
        )
    )
    if setup.precision.warning:
        say(setup.precision.warning)
    if setup.compiled.on or cfg.train.compile == "auto":
        say(setup.compiled.line())
    if note := setup.objective.start_note():
        say(note)
    if setup.mixture is not None:
        say(mixture_line(setup))
    if cfg.data.document_attention == "within":
        say("attention: each token attends to its own document of a block, from position 0 (data.document_attention)")
    if setup.saved and setup.saved.get("world_size", 1) != ctx.world_size:
        say(
            f"note: the checkpoint was written by {setup.saved.get('world_size', 1)} process(es); the data order "
            "carries over, dropout draws (and a live stream's shards) differ from an uninterrupted run"
        )


class Loop:
    """The training loop and its cadence (log, evaluate, checkpoint); `run` reads top to bottom."""

    def __init__(
        self,
        setup: TrainingSetup,
        run_dir: Path,
        eval_set: Any,
        probe: Optional[LiveProbe] = None,
        pooler: Optional[dict[str, torch.Tensor]] = None,
    ) -> None:
        # the run's config (its phases' own are setup.cfg in turn): what checkpoints save and the cadence of the run
        self.setup, self.cfg, self.ctx, self.state = setup, setup.budget.cfg, setup.ctx, setup.state
        self.run_dir, self.eval_set, self.live_probe = run_dir, eval_set, probe
        self.pooler = pooler  # the one each checkpoint keeps (`kept_pooler`; None: drawn from the seed)
        self.probe_s = 0.0  # seconds spent probing: kept off the budget's clock
        self.start_step = setup.state.step  # pause_after applies once: a resumed run goes on past it
        self.last_saved: Optional[Path] = ownership.latest_checkpoint(run_dir) if self.ctx.is_main else None
        self.live_report = LiveReport(run_dir) if self.cfg.report.html else None
        self.spared: set[Path] = set()  # old checkpoints keep-last left alone because they hold a user's files
        self.shown_loss: Optional[float] = None  # the progress bar's loss: the last one read

    def run(self) -> Path:
        cfg, state, ctx, budget = self.cfg, self.state, self.ctx, self.setup.budget
        reporter = Reporter(
            self.run_dir if ctx.is_main else None,
            budget.known_steps(),
            enabled=ctx.is_main,
            show_bar=cfg.train.progress,
            trackers=cfg.train.active_trackers,
            params=cfg.to_dict(),
            initial_step=state.step,
        )
        stopper = StopRequested()
        window, meter, planned = Window(), RateMeter(), False
        started = time.perf_counter() - state.elapsed_s  # wall time carries over a resume, for max_time
        stopped = False
        eval_loss: Optional[float] = None
        try:
            if cfg.model.init_from and state.step == 0:  # the base model's own figures open metrics.jsonl
                self.evaluate(reporter)
            if budget.phase_ended(state):  # resumed at a phase's end, which a kill may have left before keeping
                on_main(ctx, self.keep_phase)
            while not budget.finished(state):
                if budget.phase_ended(state):  # the phase before has ended (its checkpoint kept): the next begins
                    self.next_phase(reporter)
                    window, meter, planned = Window(), RateMeter(), False  # a phase runs at its own pace
                phase = self.setup.cfg  # the config in force: the phase's
                # fetch the step's micro-batches (timed: a loop that waits for data is data-bound), then one step
                fetch_started = time.perf_counter()
                micro = [next(self.setup.batches) for _ in range(self.setup.accum_steps())]
                window.wait_s += time.perf_counter() - fetch_started
                drawn = self.drawn()  # a mixture's blocks of each source in this step
                result = train_step(
                    self.setup, micro, lambda: time.perf_counter() - started - self.probe_s, stopper.flag
                )
                self.count_sources(drawn, reporter)
                window.tokens += result.tokens
                meter.add(time.perf_counter(), result.tokens)
                steps_per_s, tokens_per_step = meter.steps_per_s(), meter.tokens_per_step()
                plan = forecast(budget, state, steps_per_s, tokens_per_step, self.setup.ramp) if meter.ready() else None
                if plan is not None and not planned:  # once a phase: the measured rate turned into the time left
                    reporter.message(plan.line(steps_per_s, steps_per_s * tokens_per_step))
                    planned = True
                total = plan.final_step if plan is not None else None
                left = plan.left() if plan is not None else ""
                name = budget.name_of(state)
                reporter.advance(state.step, self.shown_loss, result.lr, window.tokens_per_s(), total, name, left)
                # the step's figures stay on the device, read only where a line, an evaluation, a checkpoint or the
                # end needs them: between those, the host queues steps without waiting
                logs = state.step % phase.train.log_every == 0
                evaluates, saves = (
                    _every(state.step, phase.train.eval_every),
                    _every(state.step, phase.checkpoint.save_every),
                )
                pause = cfg.train.pause_after
                stopping = result.stop_requested or bool(pause and self.start_step < pause <= state.step)
                phase_over = budget.phase_ended(state)  # a phase ended here and another follows: evaluate and keep
                last = stopping or budget.finished(state)
                if logs or evaluates or saves or last or phase_over:  # the last steps' window is logged too
                    self.settle(result, reporter, window if logs or last or phase_over else None)
                    window = Window() if logs or phase_over else window
                eval_loss = self.evaluate(reporter) if evaluates or phase_over else None
                self.probe(reporter, evaluates or phase_over)
                if saves or phase_over:
                    self.save(eval_loss)
                if phase_over:
                    on_main(ctx, self.keep_phase)
                if stopping:
                    stopped = True
                    break
            else:  # budget spent: a last evaluation unless this very step had one
                if not (_every(state.step, self.setup.cfg.train.eval_every) and state.step > 0):
                    eval_loss = self.evaluate(reporter)
                self.probe(reporter, evaluated=True, final=True)
            # every rank takes the same branch here: save() holds collectives
            if not (_every(state.step, self.setup.cfg.checkpoint.save_every) and state.step > 0):
                self.save(eval_loss)
            if budget.phases and budget.finished(state):  # the last phase's end: its checkpoint kept too
                on_main(ctx, self.keep_phase)
        finally:
            stopper.restore()
            reporter.close()
        if ctx.is_main:
            self.farewell(stopped)
        return self.last_saved if self.last_saved is not None else self.run_dir

    def next_phase(self, reporter: Reporter) -> None:
        """Move on to the next phase: its config, data, masking and optimizer settings (`enter_phase`), and its
        validation blocks at its length; say so."""
        setup, budget = self.setup, self.setup.budget
        enter_phase(setup)
        cfg = setup.cfg
        if self.eval_set is not None:  # rank 0 evaluates: the validation blocks at the phase's length
            self.eval_set = eval_set(setup.objective, cfg.store_dir, setup.tokenizer, cfg.train.eval_max_blocks)
        if self.live_probe is not None:  # its cadence (probe.every) is the phase's
            self.live_probe.cfg = cfg.probe
        phase = budget.phases[self.state.phase]
        key, amount = phase.budget
        settings = (
            ", ".join(f"{name}: {yaml_value(value)}" for name, value in phase.set.items()) or "no settings changed"
        )
        reporter.message(f"step {self.state.step}: phase {phase.name} begins ({key} {amount:g}; {settings})")
        if setup.mixture is not None:
            reporter.message(mixture_line(setup))

    def drawn(self) -> Optional[dict[str, int]]:
        """The tokens of each source of a data mixture in the step about to run (blocks x seq_len); None without."""
        setup = self.setup
        if setup.mixture is None:
            return None
        step = stream_step(self.state)
        counts = setup.mixture.draw.step_counts(np.array([step]), np.array([setup.ramp.size(step)]))[0]
        seq_len = setup.cfg.data.seq_len
        return {name: int(count) * seq_len for name, count in zip(setup.mixture.names, counts, strict=True)}

    def count_sources(self, drawn: Optional[dict[str, int]], reporter: Reporter) -> None:
        """Add a step's tokens of each source to the run's counts (`source_tokens`); say when a source has given all
        its tokens once and repeats from then on."""
        if drawn is None:
            return
        totals, mixture = self.state.source_tokens, self.setup.mixture
        for (name, tokens), blocks in zip(drawn.items(), mixture.blocks, strict=True):
            size = len(blocks) * blocks.seq_len  # the tokens of one pass over the source, in blocks
            before = totals.get(name, 0)
            totals[name] = before + tokens
            if before < size <= totals[name] and self.ctx.is_main:
                reporter.message(
                    f"step {self.state.step}: the source {name} has given all its {size:,} tokens once; it repeats "
                    "from here (metrics: source_tokens)"
                )

    def keep_phase(self) -> None:
        """Keep the checkpoint just saved, the end of the state's phase, as checkpoints/phase-NAME (keep_last never
        prunes it): the point a run branches from to go on with another phase (ModernBERT's "anneal on your
        domain"). Nothing when it is kept already (a resume at the phase's end) or no checkpoint is at this step."""
        step, name = self.state.step, self.setup.budget.name_of(self.state)
        if self.last_saved is None or ckpt.recorded_step(self.last_saved) != step:
            return
        if ckpt.recorded_step(ownership.checkpoints_dir(self.run_dir) / f"phase-{name}") == step:
            return
        kept = ownership.keep_copy(self.last_saved, f"phase-{name}")
        say(f"phase {name} ended at step {step}: its checkpoint is kept as {kept}")

    def settle(self, result: StepResult, reporter: Reporter, window: Optional[Window]) -> None:
        """Read the latest step's figures (one copy from the device) and bring the state's non-finite counts up to
        date; with a `window`, write the step's metrics line. Steps skipped since the last read are reported and
        logged (`nonfinite_skipped`, the run's count); a row of train.max_nonfinite skipped steps stops the run
        (the last good checkpoint stays). The row is checked here, so a run may go on skipping for up to
        train.log_every - 1 steps (no weight changes on a skipped step) before it stops."""
        state, reading = self.state, result.read()
        newly = reading.nonfinite_total - state.nonfinite_total
        state.nonfinite_in_row, state.nonfinite_total = reading.nonfinite_in_row, reading.nonfinite_total
        if newly:
            reporter.log(
                {
                    "step": state.step,
                    "tokens": state.tokens,
                    "flops": state.flops,
                    "nonfinite_skipped": state.nonfinite_total,
                }
            )
            reporter.message(
                f"step {state.step}: {newly} step(s) skipped for a non-finite loss or gradient since the last "
                f"report (loss {reading.loss}, gradient norm {reading.grad_norm} at this step; "
                f"{state.nonfinite_in_row} in a row now, {state.nonfinite_total} in all)"
            )
        if reading.longest_nonfinite_run >= self.cfg.train.max_nonfinite:
            kept = f"; the last good checkpoint is {self.last_saved}" if self.last_saved else ""
            raise UserError(
                "train",
                f"{reading.longest_nonfinite_run} non-finite losses or gradients in a row by step "
                f"{state.step}{kept}; lower optim.lr or use train.precision fp32/bf16",
            )
        if reading.skipped:
            return  # a skipped step has no loss or gradient norm to show or log: its line is the count above
        self.shown_loss = reading.loss
        if window is None:
            return
        tokens_per_s = window.tokens_per_s()  # after the read: the window's steps have run on the device
        reporter.log(
            {
                "step": state.step,
                "tokens": state.tokens,
                "flops": state.flops,
                "loss": reading.loss,
                **reading.loss_terms,
                "lr": result.lr,
                # the training selection rate of the step (masking.schedule, or its phase's), as its collator drew it
                "mlm_probability": scheduled_rate(self.setup.cfg.masking, state.step - 1, self.cfg.train.max_steps),
                "seq_len": self.setup.cfg.data.seq_len,
                **self.phase_field(),
                **({"source_tokens": dict(state.source_tokens)} if state.source_tokens else {}),
                "grad_norm": reading.grad_norm,
                "tokens_per_s": tokens_per_s,
                "data_wait_share": window.wait_share(),
                "elapsed_s": round(state.elapsed_s, 3),
            }
        )

    def evaluate(self, reporter: Reporter) -> Optional[float]:
        """Validation metrics with fixed masks (rank 0; the others wait at the next collective): the live weights',
        and with train.ema the moving average's beside them (`ema_eval_*`). Returns the validation loss of the
        weights a checkpoint saves (checkpoint.save_ema: the average's), which checkpoint.keep_best ranks."""
        if self.eval_set is None or not self.ctx.is_main:
            return None
        setup, blocks, indices = self.setup, *self.eval_set
        on = Evaluation(setup.layout.micro_batch_size, self.ctx.device, setup.autocast_dtype)
        metrics, summary = setup.objective.evaluate(setup.mlm, blocks, indices, on)
        if setup.ema is not None and setup.ema.updates:  # at step 0 (a base's figures) it is the live weights
            with setup.ema.applied():
                averaged, averaged_summary = setup.objective.evaluate(setup.mlm, blocks, indices, on)
            metrics.update({f"ema_{key}": value for key, value in averaged.items()})
            summary = f"{summary}; moving average: {averaged_summary}"
        at = {"step": self.state.step, "tokens": self.state.tokens, "flops": self.state.flops}
        reporter.log({**at, **metrics, "seq_len": setup.cfg.data.seq_len, **self.phase_field()})
        where = (
            f" (phase {setup.budget.name_of(self.state)}, blocks of {setup.cfg.data.seq_len})"
            if setup.budget.phases
            else ""
        )
        reporter.message(f"step {self.state.step}{where}: {summary}")
        return metrics.get("ema_eval_loss" if self.cfg.checkpoint.save_ema else "eval_loss", metrics["eval_loss"])

    def phase_field(self) -> dict[str, str]:
        """{"phase": its name} for a metrics line of a run of phases; nothing for a run without."""
        return {"phase": self.setup.budget.name_of(self.state)} if self.setup.budget.phases else {}

    def probe(self, reporter: Reporter, evaluated: bool, final: bool = False) -> None:
        """The live downstream probe when due (rank 0), into metrics.jsonl, its time off the budget's clock (the
        other ranks wait at the next collective)."""
        state = self.state
        try:
            result = self.live_probe.when_due(self.setup.mlm, state.step, evaluated, final) if self.live_probe else None
        except ProbeDiverged as error:  # a probe's own trouble: say so, and pretraining goes on
            reporter.message(f"step {state.step}: probe skipped: {error.message}")
            return
        if result is not None:
            reporter.log({"step": state.step, "tokens": state.tokens, "flops": state.flops, **metric_record(result)})
            reporter.message(f"step {state.step}: {self.live_probe.summary(result)}")
            self.probe_s += result.seconds

    def save(self, eval_loss: Optional[float]) -> None:
        """Checkpoint on rank 0 (every rank's RNG state included) while the others wait, so no rank reads ahead."""
        setup, ctx, state = self.setup, self.ctx, self.state
        if not all(bool(torch.isfinite(p).all()) for p in setup.mlm.parameters()):
            # weights are identical on every rank under DDP, so all ranks stop here together
            raise UserError(
                "train",
                f"the weights became non-finite by step {state.step}; no checkpoint written "
                "(the last good one stays); lower optim.lr or keep optim.grad_clip > 0",
            )
        rng = gather_objects(ctx, ckpt.rng_state())

        def write() -> Path:
            if eval_loss is not None and eval_loss < state.best_eval_loss:
                state.best_eval_loss, state.best_step = eval_loss, state.step
            training_state = {
                "optimizer": setup.optimizer.state_dict(),
                "scaler": setup.scaler.state_dict(),
                "train_state": vars(state).copy(),
                "rng": rng,
                "world_size": ctx.world_size,
                "accum_steps": setup.layout.accum_steps,  # with micro_batches: the data position in global batches
                **setup.objective.training_state(setup.mlm),  # what it trains beside the saved model
            }
            if setup.ema is not None:
                training_state[ema.STATE_KEY] = setup.ema.state_dict()
            with setup.ema.applied() if self.cfg.checkpoint.save_ema else nullcontext() as live:
                if live is not None:  # the model saved is the average: the live weights go in the training state
                    training_state[ema.LIVE_KEY] = live
                folder = ckpt.save_checkpoint(
                    self.run_dir,
                    state.step,
                    setup.mlm,
                    setup.tokenizer,
                    self.cfg,
                    training_state,
                    {"tokens": state.tokens, "eval_loss": eval_loss, **self.phase_field()},
                    self.pooler,
                    setup.objective.facts(),
                )
            best = self.run_dir / "checkpoints" / f"step-{state.best_step}" if self.cfg.checkpoint.keep_best else None
            for old, foreign in ownership.prune_checkpoints(self.run_dir, self.cfg.checkpoint.keep_last, keep=best):
                if old not in self.spared:  # said once per folder, not at every save
                    self.spared.add(old)
                    say(f"kept {old} past checkpoint.keep_last: {ownership.why_spared(foreign)}; delete it if unneeded")
            if self.live_report is not None:
                self.live_report.refresh()  # never raises: a failed page must not stop the run
            return folder

        self.last_saved = on_main(ctx, write) or self.last_saved  # a failed write (disk full) stops every rank

    def farewell(self, stopped: bool) -> None:
        latest = self.run_dir / "checkpoints" / "latest"
        if stopped:
            launcher = "torchrun <same options> -m " if self.ctx.distributed else ""
            say(
                f"stopped at step {self.state.step}; checkpoint {self.last_saved}. Resume with: "
                f"{launcher}mlmtrain pretrain --config {self.run_dir / 'mlmtrain.yaml'} --resume"
            )
            return
        ended = self.setup.budget.spent(self.state)
        say(
            f"done: {self.state.step} steps, {self.state.tokens:,} tokens in {self.state.elapsed_s:.0f}s, until "
            f"{' and '.join(ended) or 'the budget'} ended the run; checkpoint {self.last_saved} (also {latest})"
        )
        best = self.run_dir / "checkpoints" / f"step-{self.state.best_step}"
        if self.cfg.checkpoint.keep_best and self.state.best_step < self.state.step and best.is_dir():
            say(f"the lowest validation loss was at step {self.state.best_step}: {best} (checkpoint.keep_best)")
        say(f'try: mlmtrain fill-mask --model {latest} "a sentence with a [MASK] in it"')
        say(f"and: mlmtrain eval-perplexity --model {latest} --config {self.run_dir / 'mlmtrain.yaml'}")


@dataclass
class Window:
    """One logging window's throughput and the share of it spent waiting for the data loader."""

    started: float = field(default_factory=time.perf_counter)
    tokens: int = 0
    wait_s: float = 0.0

    def tokens_per_s(self) -> float:
        return self.tokens / max(time.perf_counter() - self.started, 1e-9)

    def wait_share(self) -> float:
        return round(self.wait_s / max(time.perf_counter() - self.started, 1e-9), 4)


def mixture_line(setup: TrainingSetup) -> str:
    """What a data mixture draws: each source's target share of the blocks, and what sets them."""
    mixture, temperature = setup.mixture, setup.cfg.data.mixture_temperature
    shares = ", ".join(f"{name} {share:.1%}" for name, share in zip(mixture.names, mixture.shares, strict=True))
    rule = f"by tokens^{temperature:g}, data.mixture_temperature" if temperature is not None else "by weight"
    return f"data mixture: {shares} of each step's blocks ({rule})"


def _every(step: int, interval: int) -> bool:
    return bool(interval) and step % interval == 0
