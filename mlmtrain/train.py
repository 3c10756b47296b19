"""`pretrain(cfg)`: build the parts, run the loop, evaluate and checkpoint on a cadence.

Read `_train_loop` top to bottom: one optimizer step = fetch the step's micro-batches, count the
selected tokens of the whole global batch, forward/backward each micro-batch (all-reduce only on
the last), skip non-finite steps, clip, set the learning rate, step; then log, evaluate, checkpoint.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from mlmtrain import checkpoint as ckpt
from mlmtrain.config import Config, save_config
from mlmtrain.data import LiveMicroBatches, MicroBatches, StoreBlocks, batch_layout, evaluation_blocks, make_loader
from mlmtrain.distributed import DistContext, all_reduce_sum, gather_objects, init_distributed, on_main, teardown
from mlmtrain.errors import UserError
from mlmtrain.evaluate import evaluate_blocks
from mlmtrain.guard import RunLock, StopRequested, check_before_start, claim_run_dir, interrupt_on_sigterm
from mlmtrain.masking import MaskingCollator, VocabInfo
from mlmtrain.model import MaskedLM, build_model
from mlmtrain.optim import build_optimizer, learning_rate, set_learning_rate
from mlmtrain.progress import Reporter, say
from mlmtrain.tokenizer import load_tokenizer, tokenizer_fingerprint
from mlmtrain.tokens import TokenStore, tokenize_corpus


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


def pretrain(cfg: Config, resume: Optional[str] = None, overwrite: bool = False) -> Path:
    """`mlmtrain pretrain`: returns the folder of the final checkpoint."""
    ctx = init_distributed(cfg.train.device)
    try:
        return _pretrain(cfg, ctx, resume, overwrite)
    finally:
        teardown(ctx)


# ---------------------------------------------------------------------------------------------
# Set-up


def _precision(cfg: Config, device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype (None: plain fp32)."""
    name = cfg.train.precision
    if name == "auto":
        name = "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[name]


def _ensure_data(cfg: Config) -> None:
    """Tokenize first when the store is missing or stale, so one command does the whole job (rank 0 only)."""
    if cfg.data.use_store:
        tokenize_corpus(cfg)
    else:
        from mlmtrain.corpus import corpus_splits
        from mlmtrain.tokens import prepare_tokenizer

        prepare_tokenizer(cfg, corpus_splits(cfg.data)[0])


# ---------------------------------------------------------------------------------------------
# The run


def _pretrain(cfg: Config, ctx: DistContext, resume: Optional[str], overwrite: bool) -> Path:
    run_dir = Path(cfg.train.run_dir)
    if resume is not None and overwrite:
        raise UserError(
            "argument", "--resume and --overwrite contradict each other (--overwrite deletes the run); drop one"
        )
    if resume not in (None, "auto"):
        ckpt.resolve_resume(run_dir, resume)  # a mistyped folder fails now, not after tokenizing
    # Rank 0 alone locks, checks and tokenizes; on_main shares its verdict, so a refusal stops every rank at once.
    lock = on_main(ctx, lambda: RunLock(run_dir))
    try:
        on_main(ctx, lambda: claim_run_dir(run_dir, resume, overwrite))
        resume_from = ckpt.resolve_resume(run_dir, resume) if resume is not None else None
        # a resume that cannot work is refused before the tokenizer or the store is rebuilt
        on_main(ctx, lambda: check_before_start(cfg, ctx.device, resume_from))
        with interrupt_on_sigterm():
            on_main(ctx, lambda: _ensure_data(cfg))
            if ctx.is_main and resume == "auto" and resume_from is None:
                say(f"no checkpoint in {run_dir}; starting a new run")
            return _run(cfg, ctx, run_dir, resume_from)
    finally:
        if lock is not None:
            lock.release()


def _run(cfg: Config, ctx: DistContext, run_dir: Path, resume_from: Optional[Path]) -> Path:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # transformers' own save/load bars would break our progress bar every checkpoint
    device = ctx.device
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    vocab = VocabInfo.from_tokenizer(tokenizer)
    fingerprint = tokenizer_fingerprint(tokenizer)
    layout = batch_layout(cfg.train.batch_size, cfg.train.micro_batch_size, ctx.world_size, ctx.rank)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 matmuls: free speed on Ampere+ at no cost to MLM quality
        torch.backends.cudnn.allow_tf32 = True

    # --- model, optimizer, state (fresh or from a checkpoint)
    state = TrainState()
    saved: dict[str, Any] = {}
    if resume_from is not None:
        saved = ckpt.load_training_state(resume_from)
        mlm = ckpt.load_resume_model(resume_from, cfg, len(tokenizer), fingerprint)
        state = TrainState(**saved["train_state"])
        # micro_batches counts this rank's micro-batches; another world size or micro-batch takes the same global
        # batches in other bites, so carry the position over in whole global batches.
        state.micro_batches = state.micro_batches // saved.get("accum_steps", layout.accum_steps) * layout.accum_steps
    else:
        torch.manual_seed(cfg.train.seed)  # identical initial weights on every rank
        mlm = build_model(cfg.model, vocab_size=len(tokenizer), pad_id=vocab.pad_id)
    mlm.to(device).train()  # from_pretrained hands back a model in eval mode: dropout must be on again
    model: torch.nn.Module = MaskedLM(mlm, sparse_head=cfg.model.sparse_head)
    if cfg.train.compile:
        model = torch.compile(model)
    if ctx.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = build_optimizer(mlm, cfg.optim, device)
    autocast_dtype = _precision(cfg, device)
    scaler = torch.amp.GradScaler(device.type, enabled=autocast_dtype == torch.float16)
    if saved:
        optimizer.load_state_dict(saved["optimizer"])
        scaler.load_state_dict(saved["scaler"])

    # --- data
    collator = MaskingCollator(vocab, cfg.masking, seed=cfg.train.seed)
    if cfg.data.use_store:
        store = TokenStore(cfg.store_dir, "train")
        if store.tokenizer_fingerprint != fingerprint:
            raise UserError(
                "data",
                f"token store {cfg.store_dir} was encoded with another tokenizer than "
                f"{cfg.tokenizer_dir}; run `mlmtrain tokenize` again",
            )
        blocks = StoreBlocks(store, cfg.data.seq_len, cfg.data.packing, tokenizer.cls_token_id, tokenizer.sep_token_id)
        dataset = MicroBatches(blocks, collator, layout, cfg.train.seed, start=state.micro_batches)
    else:
        from mlmtrain.corpus import corpus_splits

        dataset = LiveMicroBatches(
            corpus_splits(cfg.data)[0],
            cfg.tokenizer_dir,
            collator,
            layout,
            cfg.data.seq_len,
            cfg.train.seed,
            cfg.data.shuffle_buffer,
            cfg.data.num_workers,
            start=state.micro_batches,
        )
    loader = make_loader(dataset, cfg.data.num_workers, pin_memory=device.type == "cuda")
    eval_set = _eval_set(cfg, tokenizer) if ctx.is_main and cfg.train.eval_every else None

    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir)
        (run_dir / "run.json").write_text(
            json.dumps({"tokenizer_fingerprint": fingerprint, "world_size": ctx.world_size}, indent=1)
        )
        params = sum(p.numel() for p in mlm.parameters())
        say(
            f"pretrain: {params / 1e6:.1f}M parameters on {device} ({autocast_dtype or 'fp32'}), "
            f"{ctx.world_size} process(es), global batch {layout.global_batch} x {cfg.data.seq_len} tokens "
            f"(micro-batch {layout.micro_batch_size}, accumulation {layout.accum_steps})"
            + (f", resuming from {resume_from} at step {state.step}" if resume_from else "")
        )
        if saved and saved.get("world_size", 1) != ctx.world_size:
            say(
                f"note: the checkpoint was written by {saved.get('world_size', 1)} process(es); the data order "
                "carries over, dropout draws (and a live stream's shards) differ from an uninterrupted run"
            )
    batches = iter(loader)  # starting a DataLoader draws from the global RNG: seed or restore it afterwards
    if saved and ctx.rank < len(saved["rng"]):
        ckpt.set_rng_state(saved["rng"][ctx.rank])  # each rank its own: dropout continues as if never stopped
    else:  # a fresh run, or a rank the saved run did not have
        torch.manual_seed(cfg.train.seed + ctx.rank)  # dropout differs across ranks, reproducibly
    loop = Loop(
        cfg, ctx, run_dir, mlm, model, optimizer, scaler, autocast_dtype, tokenizer, vocab, layout, state, eval_set
    )
    return loop.run(batches)


def _eval_set(cfg: Config, tokenizer: Any) -> Optional[tuple[Any, list[int]]]:
    """Validation blocks for training-time evaluation (None when the validation split has no full block)."""
    if not cfg.data.use_store:
        return None
    try:
        blocks = StoreBlocks(
            TokenStore(cfg.store_dir, "validation"),
            cfg.data.seq_len,
            True,
            tokenizer.cls_token_id,
            tokenizer.sep_token_id,
        )
    except UserError as error:
        say(f"evaluation disabled: {error.message}")
        return None
    return blocks, evaluation_blocks(blocks, cfg.train.eval_max_blocks)


class Loop:
    """The training loop and its cadence (log, evaluate, checkpoint); `run` reads top to bottom."""

    def __init__(
        self,
        cfg: Config,
        ctx: DistContext,
        run_dir: Path,
        mlm: Any,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: Any,
        autocast_dtype: Optional[torch.dtype],
        tokenizer: Any,
        vocab: VocabInfo,
        layout: Any,
        state: TrainState,
        eval_set: Any,
    ) -> None:
        self.cfg, self.ctx, self.run_dir = cfg, ctx, run_dir
        self.mlm, self.model, self.optimizer, self.scaler = mlm, model, optimizer, scaler
        self.autocast_dtype, self.tokenizer, self.vocab, self.layout = autocast_dtype, tokenizer, vocab, layout
        self.state, self.eval_set = state, eval_set
        self.device = ctx.device
        self.budget_time = cfg.train.max_time_seconds
        self.start_step = state.step  # pause_after applies once: a resumed run goes on past it

    # -- budget and schedule
    def progress(self) -> float:
        """Fraction of the budget used: the largest of steps, tokens and wall time (whichever are set)."""
        t, s = self.cfg.train, self.state
        parts = [0.0]
        if t.max_steps:
            parts.append(s.step / t.max_steps)
        if t.max_tokens:
            parts.append(s.tokens / t.max_tokens)
        if self.budget_time:
            parts.append(s.elapsed_s / self.budget_time)
        return max(parts)

    def autocast(self) -> Any:
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def run(self, batches: Any) -> Path:
        cfg, state, ctx = self.cfg, self.state, self.ctx
        reporter = Reporter(
            self.run_dir if ctx.is_main else None,
            cfg.train.max_steps,
            enabled=ctx.is_main,
            show_bar=cfg.train.progress,
            tensorboard=cfg.train.tensorboard,
            initial_step=state.step,
        )
        stopper = StopRequested()
        last_saved: Optional[Path] = ckpt.latest_checkpoint(self.run_dir) if ctx.is_main else None
        window_start, window_tokens = time.perf_counter(), 0
        clock = time.perf_counter() - state.elapsed_s  # wall time carries over a resume, for max_time
        stopped_by_signal = False
        eval_loss: Optional[float] = None
        try:
            while self.progress() < 1.0:
                # 1. One optimizer step's micro-batches, fetched first: the loss is normalised by the
                #    number of selected tokens in the whole global batch (all ranks, all micro-steps).
                micro = [next(batches) for _ in range(self.layout.accum_steps)]
                state.micro_batches += len(micro)
                local = torch.tensor(
                    [
                        sum(int((b["labels"] != -100).sum()) for b in micro),
                        sum(_count_tokens(b) for b in micro),
                        float(stopper.flag),
                    ],
                    dtype=torch.float64,
                )
                selected, tokens, stop_votes = all_reduce_sum(ctx, local).tolist()

                # 2. Forward/backward per micro-batch; DDP all-reduces gradients on the last one only.
                loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
                for i, batch in enumerate(micro):
                    batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
                    last = i == len(micro) - 1
                    sync = nullcontext() if last or not ctx.distributed else self.model.no_sync()
                    with sync:
                        with self.autocast():
                            nll = self.model(**batch)
                        # nll is a sum: dividing by the global selected count gives the mean over every selected
                        # token; DDP averages gradients over ranks, so multiply back by the world size.
                        self.scaler.scale(nll * ctx.world_size / max(selected, 1.0)).backward()
                    loss_sum += nll.detach().double()
                loss = float(all_reduce_sum(ctx, loss_sum)) / max(selected, 1.0)

                # 3. A non-finite loss (or an empty selection) skips the step; all ranks agree because
                #    the loss was reduced over all of them.
                if not math.isfinite(loss) or selected == 0:
                    self.optimizer.zero_grad(set_to_none=True)
                    state.nonfinite_in_row += 1
                    state.nonfinite_total += 1
                    reporter.message(
                        f"step {state.step + 1}: loss is {loss}; step skipped ({state.nonfinite_in_row} in a row)"
                    )
                    if state.nonfinite_in_row >= cfg.train.max_nonfinite:
                        kept = f"; the last good checkpoint is {last_saved}" if last_saved else ""
                        raise UserError(
                            "train",
                            f"{state.nonfinite_in_row} non-finite losses in a row at step "
                            f"{state.step}{kept}; lower optim.lr or use train.precision fp32/bf16",
                        )
                    continue
                state.nonfinite_in_row = 0

                # 4. Clip, set the learning rate for this step, step.
                self.scaler.unscale_(self.optimizer)
                clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.mlm.parameters(), clip))
                if state.step == cfg.optim.warmup_steps:
                    state.warmup_end_progress = self.progress()
                lr = learning_rate(state.step, self.progress(), cfg.optim, state.warmup_end_progress)
                set_learning_rate(self.optimizer, lr)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad(set_to_none=True)
                state.step += 1
                state.tokens += int(tokens)
                window_tokens += int(tokens)
                state.elapsed_s = time.perf_counter() - clock

                # 5. Report, evaluate, checkpoint.
                now = time.perf_counter()
                tokens_per_s = window_tokens / max(now - window_start, 1e-9)
                reporter.advance(state.step, loss, lr, tokens_per_s)
                if state.step % cfg.train.log_every == 0:
                    reporter.log(
                        {
                            "step": state.step,
                            "tokens": state.tokens,
                            "loss": loss,
                            "lr": lr,
                            "grad_norm": grad_norm,
                            "tokens_per_s": tokens_per_s,
                            "elapsed_s": round(state.elapsed_s, 3),
                        }
                    )
                    window_start, window_tokens = time.perf_counter(), 0
                eval_loss = None
                if cfg.train.eval_every and state.step % cfg.train.eval_every == 0:
                    eval_loss = self.evaluate(reporter)
                if cfg.checkpoint.save_every and state.step % cfg.checkpoint.save_every == 0:
                    last_saved = self.save(eval_loss) or last_saved
                pause = cfg.train.pause_after
                if stop_votes > 0 or (pause and self.start_step < pause <= state.step):
                    stopped_by_signal = True
                    break
            else:  # budget spent: a last evaluation unless this very step had one
                evaluated = cfg.train.eval_every and state.step % cfg.train.eval_every == 0 and state.step > 0
                if not evaluated:
                    eval_loss = self.evaluate(reporter)
            # every rank takes the same branch here: save() holds collectives
            saved_now = cfg.checkpoint.save_every and state.step % cfg.checkpoint.save_every == 0 and state.step > 0
            if not saved_now:
                last_saved = self.save(eval_loss) or last_saved
        finally:
            stopper.restore()
            reporter.close()
        if ctx.is_main:
            self.farewell(last_saved, stopped_by_signal)
        return last_saved if last_saved is not None else self.run_dir

    def evaluate(self, reporter: Reporter) -> Optional[float]:
        """Validation loss and perplexity with fixed masks (rank 0; other ranks wait at the next collective)."""
        if self.eval_set is None or not self.ctx.is_main:
            return None
        blocks, indices = self.eval_set
        result = evaluate_blocks(
            self.mlm,
            blocks,
            indices,
            self.vocab,
            self.cfg.masking,
            self.cfg.masking.eval_seed,
            self.layout.micro_batch_size,
            self.device,
            self.autocast_dtype,
        )
        reporter.log(
            {
                "step": self.state.step,
                "tokens": self.state.tokens,
                "eval_loss": result.loss,
                "eval_ppl": result.perplexity,
                "eval_masked_tokens": result.masked_tokens,
                "eval_seconds": round(result.seconds, 3),
            }
        )
        reporter.message(
            f"step {self.state.step}: validation loss {result.loss:.4f}, perplexity {result.perplexity:.2f}"
        )
        return result.loss

    def save(self, eval_loss: Optional[float]) -> Optional[Path]:
        """Checkpoint on rank 0 (every rank's RNG state included) while the others wait, so no rank reads ahead."""
        ctx, state = self.ctx, self.state
        if not all(bool(torch.isfinite(p).all()) for p in self.mlm.parameters()):
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
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "train_state": vars(state).copy(),
                "rng": rng,
                "world_size": ctx.world_size,
                "accum_steps": self.layout.accum_steps,  # with micro_batches: the data position in global batches
            }
            folder = ckpt.save_checkpoint(
                self.run_dir,
                state.step,
                self.mlm,
                self.tokenizer,
                self.cfg,
                training_state,
                {"tokens": state.tokens, "eval_loss": eval_loss},
            )
            best = self.run_dir / "checkpoints" / f"step-{state.best_step}" if self.cfg.checkpoint.keep_best else None
            ckpt.prune_checkpoints(self.run_dir, self.cfg.checkpoint.keep_last, keep=best)
            return folder

        return on_main(ctx, write)  # a failed write (disk full) stops every rank, not only rank 0

    def farewell(self, last_saved: Optional[Path], stopped: bool) -> None:
        latest = self.run_dir / "checkpoints" / "latest"
        if stopped:
            launcher = "torchrun <same options> -m " if self.ctx.distributed else ""
            say(
                f"stopped at step {self.state.step}; checkpoint {last_saved}. Resume with: "
                f"{launcher}mlmtrain pretrain --config <your config> --resume (same --set options)"
            )
            return
        say(
            f"done: {self.state.step} steps, {self.state.tokens:,} tokens in {self.state.elapsed_s:.0f}s; "
            f"checkpoint {last_saved} (also {latest})"
        )
        say(f'try: mlmtrain fill-mask --model {latest} "a sentence with a [MASK] in it"')
        say(f"and: mlmtrain eval-perplexity --model {latest} --config <your config>")


def _count_tokens(batch: dict[str, torch.Tensor]) -> int:
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else batch["input_ids"].numel()
