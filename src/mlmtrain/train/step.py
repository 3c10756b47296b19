"""What one optimizer step needs and does: `build_setup` (the `TrainingSetup`: model, optimizer, scaler, state and
the micro-batch stream, fresh or from a checkpoint) and `train_step` (count the global batch's selected tokens,
forward/backward each micro-batch with all-reduce on the last only, clip, set the learning rate, step, and skip a
non-finite step on the device: nothing waits for the device; `StepResult.read` copies a step's figures in one go).

`loop.py` runs them in its loop; `scripts/benchmark.py` times the same two functions as the bare step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from transformers.utils import logging as hf_logging

from mlmtrain.config import Config, mixture_of
from mlmtrain.data.blocks import (
    BatchLayout,
    BatchRamp,
    LiveMicroBatches,
    MicroBatches,
    Mixture,
    batch_layout,
    make_loader,
    raise_worker_errors,
)
from mlmtrain.data.masking import VocabInfo
from mlmtrain.data.mixture import MixtureDraw, mixture_shares
from mlmtrain.data.sources import corpus_splits
from mlmtrain.data.store import TokenStore, source_units
from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_fingerprint
from mlmtrain.errors import UserError, first_line
from mlmtrain.model.bert import MaskedLM, use_training_attention
from mlmtrain.model.context import autocast_context
from mlmtrain.model.modernbert import set_rope_theta
from mlmtrain.model.optim import (
    apply_optim_config,
    build_optimizer,
    learning_rate,
    set_learning_rate,
    warmup_share,
)
from mlmtrain.runtime.distributed import DistContext, all_reduce_sum
from mlmtrain.runtime.progress import say
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train import resume_checks
from mlmtrain.train.budget import Budget, counters
from mlmtrain.train.checkpoint import SavedCheckpoint
from mlmtrain.train.compiling import CompileChoice, choose_compile
from mlmtrain.train.ema import STATE_KEY, WeightAverage, restore_live_weights
from mlmtrain.train.objectives import Objective, objective_of
from mlmtrain.train.precision import Precision, resolve_precision


@dataclass
class TrainState:
    """Everything besides weights and optimizer that a resumed run needs to continue exactly."""

    step: int = 0
    tokens: int = 0
    micro_batches: int = 0  # the data position: micro-batches this rank has consumed
    elapsed_s: float = 0.0
    nonfinite_in_row: int = 0
    nonfinite_total: int = 0
    best_eval_loss: float = float("inf")
    best_step: int = -1
    warmup_end_progress: float = 0.0  # budget share used when warm-up ended: decay is measured from there
    flops: int = 0  # training FLOPs so far: tokens x the objective's FLOPs per token, step by step
    phase: int = 0  # the phase the run is in (config phases:; 0 without phases)
    phase_name: str = ""  # its name: a resume or a branch finds it by its name
    phase_start: dict[str, float] = field(default_factory=dict)  # the counters where it began (budget.counters)
    source_tokens: dict[str, int] = field(default_factory=dict)  # a data mixture's tokens drawn from each source


@dataclass
class TrainingSetup:
    """What a run trains with (model, optimizer, scaler, state, micro-batch stream): `build_setup` makes it, fresh or
    from a checkpoint; `train_step` uses it."""

    cfg: Config  # the config in force: the current phase's (config phases:), else the run's
    ctx: DistContext
    mlm: Any  # what checkpoints save: the BertForMaskedLM, or ELECTRA's generator + discriminator
    model: torch.nn.Module  # what a step calls (the objective's step_module around mlm), compiled and/or in DDP
    objective: Objective  # what a step optimises: the loss terms its sums are divided into, their FLOPs
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    precision: Precision
    compiled: CompileChoice  # whether `model` is compiled, and why
    tokenizer: Any
    vocab: VocabInfo
    layout: BatchLayout
    state: TrainState
    batches: Iterator[dict[str, torch.Tensor]]  # micro-batches from the state's data position on
    saved: dict[str, Any]  # the checkpoint's training state; empty for a fresh run
    nonfinite: NonfiniteCounts  # the skipped-step counters, kept on the device between reads
    ema: Optional[WeightAverage] = None  # train.ema's moving average of the weights
    budget: Optional[Budget] = None  # what ends the run, and its phases; None: the run's config alone (a bare step)
    ramp: Optional[BatchRamp] = None  # each step's global batch (a batch warm-up grows it); None: layout's, always
    mixture: Optional[Mixture] = None  # a data mixture's sources and draw (the loop counts each source's tokens)

    def accum_steps(self) -> int:
        """Micro-batches this process takes for the next step."""
        return self.ramp.accum(stream_step(self.state)) if self.ramp else self.layout.accum_steps

    @property
    def autocast_dtype(self) -> Optional[torch.dtype]:
        return self.precision.dtype

    def autocast(self) -> Any:
        return autocast_context(self.ctx.device, self.autocast_dtype)


def build_setup(
    cfg: Config,
    ctx: DistContext,
    start: Optional[SavedCheckpoint] = None,
    tokenizer: Any = None,
    objective: Optional[Objective] = None,
    branched: bool = False,
) -> TrainingSetup:
    """Model, optimizer, scaler, state and the micro-batch stream, fresh or restored from the checkpoint `start` (read
    and checked by the resolution); `tokenizer` and `objective`, the run's, where it has them already (else loaded
    from the config's tokenizer folder, and built on it). `cfg` is the run's config; a run of phases trains under the
    config of the phase its state is in (`Budget`; `branched`: `start` is another run's, --branch-from)."""
    hf_logging.disable_progress_bar()  # transformers' own save/load bars would break our progress bar every checkpoint
    device = ctx.device
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(cfg.tokenizer_dir)
    vocab = VocabInfo.from_tokenizer(tokenizer)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 matmuls: free speed on Ampere+ at no cost to MLM quality
        torch.backends.cudnn.allow_tf32 = True
    budget = Budget(cfg)

    # --- model, optimizer, state (fresh or from a checkpoint)
    state, saved = TrainState(), {}
    if start is not None:
        saved = ckpt.load_training_state(start.folder)
        state = TrainState(**saved["train_state"])
        budget.place(state, branched)
    elif cfg.phases:
        state.phase_name = cfg.phases[0].name
    run_cfg, cfg = cfg, budget.config_of(state)  # the config of the phase the state is in
    layout = _layout(cfg, ctx)
    ramp = stream_ramp(cfg, layout, state)  # each step's batch in the state's stream: the data position follows it
    if objective is None or run_cfg.phases:  # a phase's objective: its masking and lengths
        objective = objective_of(cfg, vocab, objective.bases if objective is not None else None)
    if start is not None:
        mlm = resume_checks.load_start_model(start, objective)
        objective.restore_training_state(mlm, saved)  # what it trains beside the saved model (a projection)
        restore_live_weights(mlm, saved)  # a checkpoint whose model is the average keeps the live weights aside
        if ctx.is_main:  # the config's dropout applies (load_start_model); its other settings differ from the run's
            for note in resume_checks.resume_notes(start, run_cfg):
                say(note)
        # micro_batches counts this rank's micro-batches; another world size or micro-batch takes the same global
        # batches in other bites: the position is the steps taken in the stream, in this layout's micro-batches
        state.micro_batches = ramp.micro_before(stream_step(state))
    else:
        torch.manual_seed(cfg.train.seed)  # identical initial weights on every rank
        mlm = objective.build()
    mlm.to(device).train()  # from_pretrained hands back a model in eval mode: dropout must be on again
    use_training_attention(mlm)  # float32 attention under CPU autocast (model.py), fresh or resumed alike
    ema = WeightAverage(mlm, cfg.train.ema) if cfg.train.ema is not None else None  # on the device, beside the weights
    if ema is not None and STATE_KEY in saved:  # a checkpoint without one (train.ema set on resume): it starts now
        ema.load_state_dict(saved[STATE_KEY])
    precision = resolve_precision(cfg.train.precision, device)
    model = objective.step_module(mlm)
    model.head_dtype = precision.head_dtype  # bf16-head: the (generator's) masked-LM head alone in bf16
    if isinstance(model, MaskedLM):
        model.static_rows = device.type != "cpu"  # the sparse head at a fixed capacity: no data-dependent shape
    compiled = choose_compile(cfg.train, device, cfg.train.batch_size * cfg.data.seq_len, objective.flops_per_token)
    if compiled.on:
        model = torch.compile(model)
    if ctx.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = build_optimizer(mlm, cfg.optim, device)
    scaler = torch.amp.GradScaler(device.type, enabled=precision.dtype == torch.float16)
    if saved:
        _restore_optimizer(optimizer, saved["optimizer"], ctx.is_main)
        scaler.load_state_dict(saved["scaler"])
        changed = apply_optim_config(optimizer, cfg.optim)  # the config's betas, eps, weight decay win on resume
        if changed and ctx.is_main:
            say(f"note: optimizer settings from the config replace the checkpoint's ({'; '.join(changed)})")

    # --- data: the loader starts at the state's position; the RNG is seeded (fresh) or restored (resume) afterwards
    batches, mixture = _batches(_micro_batches(cfg, objective, tokenizer, layout, state, ramp), cfg, device)
    if saved and ctx.rank < len(saved["rng"]):
        ckpt.set_rng_state(saved["rng"][ctx.rank])  # each rank its own: dropout continues as if never stopped
    else:  # a fresh run, or a rank the saved run did not have
        torch.manual_seed(cfg.train.seed + ctx.rank)  # dropout differs across ranks, reproducibly
    return TrainingSetup(
        cfg,
        ctx,
        mlm,
        model,
        objective,
        optimizer,
        scaler,
        precision,
        compiled,
        tokenizer,
        vocab,
        layout,
        state,
        batches,
        saved,
        NonfiniteCounts(state, device),
        ema,
        budget,
        ramp,
        mixture,
    )


def _layout(cfg: Config, ctx: DistContext) -> BatchLayout:
    t = cfg.train
    return batch_layout(t.batch_size, t.micro_batch_size, ctx.world_size, ctx.rank, t.batch_size_start)


def stream_step(state: TrainState) -> int:
    """The step's number in the data stream it draws from: the run's, or with phases its phase's."""
    return state.step - int(state.phase_start.get("step", 0))


def stream_ramp(cfg: Config, layout: BatchLayout, state: TrainState) -> BatchRamp:
    """The global batch of each step of the state's stream: the layout's, or growing over the run's first
    train.batch_warmup_tokens tokens from where the stream begins."""
    t, unit, before = cfg.train, layout.micro_batch_size * layout.world_size, int(state.phase_start.get("tokens", 0))
    return BatchRamp(layout.global_batch, unit, t.batch_size_start, t.batch_warmup_tokens, before, cfg.data.seq_len)


def _batches(dataset: Any, cfg: Config, device: torch.device) -> tuple[Iterator[dict[str, Any]], Optional[Mixture]]:
    """This rank's micro-batches of `dataset`, made in the loader's worker processes; and the data mixture they
    draw from, if any."""
    loader = make_loader(dataset, cfg.data.num_workers, pin_memory=device.type == "cuda")
    return raise_worker_errors(iter(loader)), getattr(dataset, "mixture", None)


def enter_phase(setup: TrainingSetup) -> None:
    """Move `setup` on to the next phase (config phases:) at the state's counters: its config, objective (masking,
    lengths), batch layout and micro-batch stream from its start; the optimizer's settings and a ModernBERT's rotary
    bases as the phase sets them. The weights, the optimizer's moments and the schedule go on."""
    state, ctx = setup.state, setup.ctx
    state.phase += 1
    state.phase_name = setup.budget.phases[state.phase].name
    state.phase_start = counters(state)
    state.micro_batches = 0  # the position in the phase's own stream
    cfg = setup.cfg = setup.budget.config_of(state)
    setup.objective = objective_of(cfg, setup.vocab, setup.objective.bases)
    setup.layout = _layout(cfg, ctx)
    setup.ramp = stream_ramp(cfg, setup.layout, state)
    dataset = _micro_batches(cfg, setup.objective, setup.tokenizer, setup.layout, state, setup.ramp)
    setup.batches, setup.mixture = _batches(dataset, cfg, ctx.device)
    apply_optim_config(setup.optimizer, cfg.optim)
    set_rope_theta(setup.mlm, cfg.model)


def _restore_optimizer(optimizer: torch.optim.Optimizer, saved: dict[str, Any], notes: bool) -> None:
    """The checkpoint's optimizer state into `optimizer`, parameter by parameter name (each group keeps
    `param_names`): a parameter the run no longer trains (a distillation's projection once distill.hidden_weight is
    0) leaves its moments behind, one it trains anew starts without; a note (on rank 0, `notes`) names them."""
    current = optimizer.state_dict()
    now = [name for group in current["param_groups"] for name in group.get("param_names", [])]
    then = [name for group in saved["param_groups"] for name in group.get("param_names", [])]
    if now == then or not then:  # the same parameters (or a checkpoint whose groups name none)
        try:
            optimizer.load_state_dict(saved)
        except ValueError as error:  # other groups or sizes, and no names to follow
            raise UserError(
                "checkpoint",
                f"the checkpoint's optimizer state does not fit the parameters this run trains ({first_line(error)}); "
                "resume with the config of that run (its mlmtrain.yaml)",
            ) from None
        return
    moments = {
        name: saved["state"][index]
        for group in saved["param_groups"]
        for index, name in zip(group["params"], group["param_names"], strict=True)
        if index in saved["state"]
    }
    state = {
        index: moments[name]
        for group in current["param_groups"]
        for index, name in zip(group["params"], group["param_names"], strict=True)
        if name in moments
    }
    groups = [
        {**kept, "params": group["params"], "param_names": group["param_names"]}
        for group, kept in zip(current["param_groups"], saved["param_groups"], strict=True)
    ]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    left, fresh = sorted(set(then) - set(now)), sorted(set(now) - set(then))
    if notes:
        parts = [f"left behind the moments of {', '.join(left)} (no longer trained)"] if left else []
        parts += [f"{', '.join(fresh)} start without moments (trained anew)"] if fresh else []
        say(f"note: the checkpoint's optimizer state follows the parameters by name: {'; '.join(parts)}")


def _micro_batches(
    cfg: Config, objective: Objective, tokenizer: Any, layout: BatchLayout, state: TrainState, ramp: BatchRamp
) -> Any:
    """The dataset of this rank's masked micro-batches from the state's data position on: from the token store, or
    tokenized live."""
    if not cfg.data.use_store:
        return LiveMicroBatches(
            corpus_splits(cfg.data)[0],
            cfg.tokenizer_dir,
            objective.collator(),
            layout,
            cfg.data.seq_len,
            cfg.train.seed,
            cfg.data.shuffle_buffer,
            cfg.data.num_workers,
            start=state.micro_batches,
        )
    store = TokenStore(cfg.store_dir, "train")
    if store.tokenizer_fingerprint != tokenizer_fingerprint(tokenizer):
        raise UserError(
            "data",
            f"token store {cfg.store_dir} was encoded with another tokenizer than "
            f"{cfg.tokenizer_dir}; run `mlmtrain tokenize` again",
        )
    mixture = data_mixture(cfg, objective, tokenizer) if mixture_of(cfg.data.train) else None
    blocks, collator = objective.training_blocks(store, tokenizer) if mixture is None else (None, mixture.collator)
    return MicroBatches(blocks, collator, layout, cfg.train.seed, state.micro_batches, ramp=ramp, mixture=mixture)


def data_mixture(cfg: Config, objective: Objective, tokenizer: Any) -> Mixture:
    """The sources of data.train's mixture, each its blocks from its own tokens in the store, and the draw by their
    shares (`mixture_targets`)."""
    stores, shares = _mixture_sources(cfg)
    blocks = [objective.training_blocks(store, tokenizer)[0] for store in stores]
    names = [store.split for store in stores]
    return Mixture(names, blocks, MixtureDraw(list(shares.values()), cfg.train.seed), list(shares.values()),
                   objective.collator())  # fmt: skip


def mixture_targets(cfg: Config) -> dict[str, float]:
    """The target share of each source of data.train's mixture, by name: the weights', or data.mixture_temperature's
    by the sources' sizes in the store; {} without a mixture."""
    return _mixture_sources(cfg)[1] if mixture_of(cfg.data.train) else {}


def _mixture_sources(cfg: Config) -> tuple[list[TokenStore], dict[str, float]]:
    mixture = mixture_of(cfg.data.train) or []
    stores = [TokenStore(cfg.store_dir, name, units=[unit]) for name, unit in source_units(cfg)]
    weights = [entry.weight for entry in mixture]
    shares = mixture_shares(weights, [store.num_tokens for store in stores], cfg.data.mixture_temperature)
    return stores, {store.split: share for store, share in zip(stores, shares, strict=True)}


@dataclass
class StepReading:
    """A step's figures on the host, from `StepResult.read`'s one copy."""

    loss: float  # mean over every selected token of the global batch (nan when non-finite or nothing was selected)
    grad_norm: float
    skipped: bool  # non-finite loss or gradients, or no selected token: no update was made
    loss_terms: dict[str, float]  # each loss term's unweighted mean when the objective has several, else empty
    nonfinite_in_row: int  # skipped steps in a row up to this one (0 when this step updated)
    nonfinite_total: int  # skipped steps of the whole run up to this one
    longest_nonfinite_run: int  # the longest such row of the run so far: the loop checks train.max_nonfinite on it


@dataclass
class StepResult:
    """One step: its learning rate, tokens and stop vote on the host; its loss, gradient norm and whether it was
    skipped stay on the device (`on_device`) until `read` copies them, with the run's non-finite counts, in one go.
    The loop reads only on the steps that log, evaluate or checkpoint, and at the end."""

    lr: float  # the scheduled rate of this step (a skipped step has one too: it is a step, only without an update)
    tokens: int  # tokens of the global batch
    stop_requested: bool  # some rank was asked to stop (a signal): all ranks stop after this step
    on_device: torch.Tensor  # float64: the loss sums, grad norm, finite (1/0), then the non-finite counters
    objective: Objective
    counts: list[float]  # the global batch's counted positions, each loss term's divisor
    _reading: Optional[StepReading] = None

    def read(self) -> StepReading:
        """The step's figures on the host: one copy from the device (made once, then kept)."""
        if self._reading is None:
            values = read_device(self.on_device)
            sums = len(self.counts)
            reduced = values[:sums]
            grad_norm, finite, in_row, total, longest = values[sums:].tolist()
            self._reading = StepReading(
                float(self.objective.loss(reduced, self.counts)),
                grad_norm,
                not finite,
                self.objective.loss_terms(reduced, self.counts),
                int(in_row),
                int(total),
                int(longest),
            )
        return self._reading

    @property
    def loss(self) -> float:
        return self.read().loss

    @property
    def grad_norm(self) -> float:
        return self.read().grad_norm

    @property
    def skipped(self) -> bool:
        return self.read().skipped

    @property
    def loss_terms(self) -> dict[str, float]:
        return self.read().loss_terms


def read_device(values: torch.Tensor) -> torch.Tensor:
    """The one place a step's figures come from the device to the host (a wait for the device's queue)."""
    return values.cpu()


class NonfiniteCounts:
    """The run's skipped-step counters on the device (in a row, in all, the longest row so far), counted without the
    host; `TrainState` gets them back at each read (`Loop.settle`), and a resumed run starts from the saved ones."""

    def __init__(self, state: TrainState, device: torch.device) -> None:
        in_row, total = float(state.nonfinite_in_row), float(state.nonfinite_total)
        self.values = torch.tensor([in_row, total, in_row], dtype=torch.float64, device=device)

    def count(self, finite: torch.Tensor) -> torch.Tensor:
        """Count this step (`finite`: a 0-d bool tensor); the counters after it."""
        skipped = (~finite).double()
        in_row = (self.values[0] + 1) * skipped  # back to 0 on a step that updated
        self.values = torch.stack([in_row, self.values[1] + skipped, torch.maximum(self.values[2], in_row)])
        return self.values


def train_step(
    setup: TrainingSetup, micro: list[dict[str, torch.Tensor]], clock: Callable[[], float], stop: bool = False
) -> StepResult:
    """One optimizer step over this rank's micro-batches of the step; every rank calls it with its own share.

    Nothing waits for the device: the loss, gradient norm and whether the step was finite stay there (the result's
    `read` copies them). A step whose loss or gradients are not finite (or that selected no token) is skipped on the
    device: the optimizer's fused kernel gets a `found_inf` flag and leaves weights, moments and its step count as
    they were. It still counts as a step: `state.step`, tokens, FLOPs and the learning-rate schedule move on, only
    the update is missing (as for a step that fp16's scaler skips). Where the optimizer has no fused kernel (torch
    picks foreach on mps), the flag is read on the host instead: one wait a step there.

    `clock()` is the run's elapsed seconds. Only rank 0's reading counts: under DDP it travels in the counts'
    all-reduce at the step's start, so every rank sees the same elapsed time and so agrees on the budget and the
    learning rate.
    """
    cfg, ctx, state, objective = setup.cfg, setup.ctx, setup.state, setup.objective
    # 1. Count the selected tokens (ELECTRA: and the scored ones) of the whole global batch (all ranks, all
    #    micro-steps) on the host, from the host's batches: each loss term is normalised by its count.
    counts, tokens, stop_votes, elapsed = _global_counts(setup, micro, stop, clock)
    state.micro_batches += len(micro)

    # 2. Forward/backward per micro-batch; DDP all-reduces gradients on the last one only.
    loss_sums = torch.zeros(len(counts), dtype=torch.float64, device=ctx.device)
    for i, batch in enumerate(micro):
        batch = {k: v.to(ctx.device, non_blocking=True) for k, v in batch.items()}
        last = i == len(micro) - 1
        with nullcontext() if last or not ctx.distributed else setup.model.no_sync():
            with setup.autocast():
                sums = setup.model(**batch)
            # sums over positions: dividing by the global counts gives the mean over every counted position;
            # DDP averages gradients over ranks, so multiply back by the world size.
            setup.scaler.scale(objective.loss(sums, counts) * ctx.world_size).backward()
        loss_sums += sums.detach().double().reshape(-1)
    # 3. Unscale (fp16), clip; the loss sums over ranks (on the device), and whether the step is finite. A
    #    non-finite loss (or an empty selection, 0/0) skips the step, and so do non-finite gradients with a finite
    #    loss (seen from a bf16 attention backward on GPU): the update would make every weight NaN. Under fp16 the
    #    scaler handles those itself: its step skips, its update lowers the scale, and the step counts as finite.
    setup.scaler.unscale_(setup.optimizer)
    clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(setup.mlm.parameters(), clip).detach()
    loss_sums = all_reduce_sum(ctx, loss_sums)  # every rank the same sums, so the same verdict
    loss_finite = torch.isfinite(objective.loss(loss_sums, counts)) & (counts[0] > 0)  # no selected token: no step
    finite = loss_finite if setup.scaler.is_enabled() else loss_finite & torch.isfinite(grad_norm)
    state.elapsed_s = elapsed if ctx.distributed else clock()

    # 4. Set the learning rate for this step, step (a no-op on the device where not finite).
    budget = setup.budget or Budget(cfg)
    progress = budget.schedule_progress(state)
    if state.step == cfg.optim.warmup_steps:
        state.warmup_end_progress = progress
    # warm-up as a share of a budget other than steps, if any (phases count warm-up in steps)
    share = None if budget.phases else warmup_share(cfg.optim, cfg.train)
    lr = learning_rate(budget.lr_step(state), progress, cfg.optim, state.warmup_end_progress, share)
    set_learning_rate(setup.optimizer, lr)
    if setup.scaler.is_enabled():
        _scaler_step(setup, loss_finite)
    else:
        _step_unless_nonfinite(setup.optimizer, finite)
    setup.optimizer.zero_grad(set_to_none=True)
    if setup.ema is not None:  # every step, a skipped one too (its weights are the last step's)
        setup.ema.update()
    figures = [loss_sums, grad_norm.double().reshape(1), finite.double().reshape(1), setup.nonfinite.count(finite)]
    state.step += 1
    state.tokens += int(tokens)
    state.flops += int(tokens) * objective.flops_per_token
    return StepResult(lr, int(tokens), stop_votes > 0, torch.cat(figures), objective, counts)


def _global_counts(
    setup: TrainingSetup, micro: list[dict[str, torch.Tensor]], stop: bool, clock: Callable[[], float]
) -> tuple[list[float], float, float, float]:
    """(each loss term's count, tokens, stop votes, rank 0's clock) summed over ranks: host figures of the host's
    batches (under DDP one all-reduce, which a NCCL group makes through the device)."""
    ctx, objective = setup.ctx, setup.objective
    local = torch.tensor(
        [
            *(sum(counted) for counted in zip(*(objective.counts(b) for b in micro), strict=True)),
            sum(_count_tokens(b) for b in micro),
            float(stop),
            clock() if ctx.distributed and ctx.is_main else 0.0,
        ],
        dtype=torch.float64,
    )
    *counts, tokens, stop_votes, elapsed = all_reduce_sum(ctx, local).tolist()
    return counts, tokens, stop_votes, elapsed


def _step_unless_nonfinite(optimizer: torch.optim.Optimizer, finite: torch.Tensor) -> None:
    """optimizer.step(), made a no-op on the device where `finite` is false: torch's fused AdamW takes a `found_inf`
    flag (the attribute GradScaler sets for it) and then leaves weights, moments and step count untouched. An
    optimizer without that support reads the flag on the host."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        if bool(finite):
            optimizer.step()
        return
    optimizer.found_inf = (~finite).float()  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf  # type: ignore[attr-defined]


def _scaler_step(setup: TrainingSetup, loss_finite: torch.Tensor) -> None:
    """fp16: the scaler's step and update, which skip non-finite gradients on the device and lower the scale. A
    non-finite loss joins the scaler's own found-inf flag, so that step is skipped too, and leaves the scale and its
    growth count as they were (the loss, not the scale, is at fault). The scaler's private tensors are the only way
    to do this without reading its scale on the host."""
    scaler, optimizer = setup.scaler, setup.optimizer
    loss_nonfinite = (~loss_finite).float()
    for found in scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values():
        found.copy_(torch.maximum(found, loss_nonfinite.to(found.device)))
    scale, growth = scaler._scale.clone(), scaler._growth_tracker.clone()  # type: ignore[union-attr]
    scaler.step(optimizer)
    scaler.update()
    scaler._scale.copy_(torch.where(loss_finite, scaler._scale, scale))  # type: ignore[union-attr]
    scaler._growth_tracker.copy_(torch.where(loss_finite, scaler._growth_tracker, growth))  # type: ignore[union-attr]


def _count_tokens(batch: dict[str, torch.Tensor]) -> int:
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else batch["input_ids"].numel()
