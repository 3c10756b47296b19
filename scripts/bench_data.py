"""Benchmark of the data path against its two speed targets (issue 3), all figures measured interleaved in one run.

1. collator: masked blocks/s of mlmtrain's MaskingCollator against `transformers.DataCollatorForLanguageModeling`
   on the same blocks of a real token store. Target: ours >= 5x HF.
2. pipeline: masked micro-batches/s and tokens/s of the whole data path (token store -> StoreBlocks -> MicroBatches
   with the collator -> DataLoader with ONE worker process), plus the same in-process (num_workers=0), against the
   tokens/s that the `mini` model's training step (configs/mini.yaml, fp32, AdamW, MaskedLM sparse head, batch
   32 x 128) consumes on this machine. Target: pipeline on one worker >= 20x the training step.

The tokenizer and the token store are built by mlmtrain itself (`tokenize_corpus`, which trains, saves and reloads
the tokenizer) in --work-dir and reused by later runs.

    python scripts/bench_data.py [--corpus PATH|builtin:python-docs] [--work-dir DIR] [--blocks 2048] [--rounds 5]
                                 [--threads 1] [--sections collator,pipeline] [--quick]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import torch
from transformers import DataCollatorForLanguageModeling

from mlmtrain.config import Config, MaskingConfig, load_config
from mlmtrain.data.blocks import MicroBatches, StoreBlocks, batch_layout, make_loader
from mlmtrain.data.masking import MaskingCollator, VocabInfo
from mlmtrain.data.store import TokenStore, tokenize_corpus
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.model.bert import MaskedLM, build_model
from mlmtrain.model.optim import build_optimizer, set_learning_rate

REPO = Path(__file__).resolve().parents[1]
MINI_CONFIG = REPO / "configs" / "mini.yaml"
DEFAULT_WORK_DIR = Path("/tmp/mlmtrain-bench-data")
VOCAB_SIZE = 30522
BATCH_SIZE = 32
SEQ_LEN = 128
SEED = 0
COLLATOR_TARGET = 5.0
PIPELINE_TARGET = 20.0
SECTIONS = ("collator", "pipeline")


# ---------------------------------------------------------------------------------------------
# 1. collator against HF


def bench_collators(blocks: torch.Tensor, tokenizer, rounds: int = 5) -> dict:
    """Time both collators on `blocks` [N, T] in batches of 32; rounds alternate which one goes first.

    Returns masked blocks/s of each (median over rounds) and ours / HF.
    """
    ours = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), MaskingConfig(), seed=SEED)
    hf = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    batches = list(torch.split(blocks, BATCH_SIZE))
    # each collator gets the item form it is built for: ours needs (epoch, index), HF only input_ids
    ours_items = [[{"input_ids": b, "epoch": 0, "index": i} for i, b in enumerate(batch)] for batch in batches]
    hf_items = [[{"input_ids": b} for b in batch] for batch in batches]

    def blocks_per_s(collate: Callable, all_items: list) -> float:
        start = time.perf_counter()
        for batch_items in all_items:
            collate(batch_items)
        return len(blocks) / (time.perf_counter() - start)

    runs: dict[str, list[float]] = {"ours": [], "hf": []}
    for warmup_and_rounds in range(rounds + 1):
        order = [("ours", ours, ours_items), ("hf", hf, hf_items)]
        for name, collate, all_items in order[:: 1 if warmup_and_rounds % 2 else -1]:
            rate = blocks_per_s(collate, all_items)
            if warmup_and_rounds:  # round 0 warms caches and lazy imports
                runs[name].append(rate)
    ours_rate, hf_rate = statistics.median(runs["ours"]), statistics.median(runs["hf"])
    return {
        "blocks": len(blocks),
        "batch_size": BATCH_SIZE,
        "seq_len": blocks.shape[1],
        "rounds": rounds,
        "ours_blocks_per_s": ours_rate,
        "hf_blocks_per_s": hf_rate,
        "ratio": ours_rate / hf_rate,
        "target": COLLATOR_TARGET,
        "passed": ours_rate / hf_rate >= COLLATOR_TARGET,
    }


def store_block_tensor(blocks: StoreBlocks, count: int) -> torch.Tensor:
    """The first `count` blocks of the store as int64 [count, seq_len] (cycled when the store has fewer)."""
    return torch.stack([torch.from_numpy(blocks[i % len(blocks)]) for i in range(count)])


# ---------------------------------------------------------------------------------------------
# 2. the pipeline against the mini model's training step


class MiniTrainStep:
    """One optimizer step of the `mini` model as `Loop.run` takes it on CPU in fp32 (forward + backward of
    MaskedLM with the sparse head, loss / selected tokens, grad clipping, lr set, AdamW step, zero_grad)."""

    def __init__(self, cfg: Config, vocab: VocabInfo, vocab_size: int = VOCAB_SIZE) -> None:
        torch.manual_seed(cfg.train.seed)
        self.cfg = cfg
        self.mlm = build_model(cfg.model, vocab_size=max(vocab_size, vocab.vocab_size), pad_id=vocab.pad_id).train()
        self.model = MaskedLM(self.mlm, sparse_head=cfg.model.sparse_head)
        self.optimizer = build_optimizer(self.mlm, cfg.optim, torch.device("cpu"))
        self.parameters = sum(p.numel() for p in self.mlm.parameters())

    def __call__(self, batch: dict[str, torch.Tensor]) -> None:
        selected = int((batch["labels"] != -100).sum())
        nll = self.model(**batch)
        (nll / max(selected, 1)).backward()
        clip = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip > 0 else float("inf")
        torch.nn.utils.clip_grad_norm_(self.mlm.parameters(), clip)
        set_learning_rate(self.optimizer, self.cfg.optim.lr)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _take(batches: Iterator[dict[str, torch.Tensor]], count: int) -> tuple[int, float]:
    """(tokens, seconds) of taking `count` micro-batches from `batches`."""
    tokens = 0
    start = time.perf_counter()
    for _ in range(count):
        tokens += next(batches)["input_ids"].numel()
    return tokens, time.perf_counter() - start


def bench_pipeline(
    blocks: StoreBlocks,
    vocab: VocabInfo,
    train_step: Optional[Callable[[dict[str, torch.Tensor]], None]],
    *,
    batches: int = 200,
    rounds: int = 5,
    train_steps: int = 1,
    train_warmup: int = 2,
    threads: int = 1,
    train_threads: int = 2,
) -> dict:
    """Masked micro-batches/s of the real pipeline on one DataLoader worker and in-process, and the training
    step's tokens/s, measured in interleaved rounds (the order rotates each round); medians over rounds.

    The worker keeps its prefetch queue full while the other figures are timed, so each of its rounds first takes
    the queued micro-batches untimed, then times `batches` more: what the worker makes while the loop waits on it.
    """
    collator = MaskingCollator(vocab, MaskingConfig(), seed=SEED)
    dataset = MicroBatches(blocks, collator, batch_layout(BATCH_SIZE, None, 1, 0), SEED)
    queued = 4  # make_loader's prefetch_factor x 1 worker
    train_batches = [dataset.batch(j) for j in range(train_warmup + train_steps)]
    in_process = iter(make_loader(dataset, num_workers=0, pin_memory=False))
    torch.set_num_threads(threads)
    worker = iter(make_loader(dataset, num_workers=1, pin_memory=False))  # starts the worker process

    def run_worker() -> float:
        _take(worker, queued)
        tokens, seconds = _take(worker, batches)
        return tokens / seconds

    def run_in_process() -> float:
        tokens, seconds = _take(in_process, batches)
        return tokens / seconds

    step_times: list[float] = []

    def train(some_batches: list[dict[str, torch.Tensor]]) -> list[float]:
        torch.set_num_threads(train_threads)
        times = []
        for batch in some_batches:
            start = time.perf_counter()
            train_step(batch)
            times.append(time.perf_counter() - start)
        torch.set_num_threads(threads)
        return times

    def run_train() -> float:
        times = train(train_batches[train_warmup:])
        step_times.extend(times)
        return BATCH_SIZE * blocks.seq_len / statistics.median(times)

    figures: dict[str, Callable[[], float]] = {"worker": run_worker, "in_process": run_in_process}
    if train_step is not None:
        figures["train"] = run_train
    runs: dict[str, list[float]] = {name: [] for name in figures}
    try:
        # warm-up, untimed: the worker's start, lazy imports and first calls, the model's first steps
        _take(worker, queued + 2)
        _take(in_process, 2)
        if train_step is not None:
            train(train_batches[:train_warmup])
        names = list(figures)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                runs[name].append(figures[name]())
    finally:
        worker._shutdown_workers()  # now, rather than whenever the iterator is collected
    result: dict[str, Any] = {
        "batch_size": BATCH_SIZE,
        "seq_len": blocks.seq_len,
        "store_blocks": len(blocks),
        "batches_per_round": batches,
        "rounds": rounds,
        "worker_tokens_per_s": statistics.median(runs["worker"]),
        "in_process_tokens_per_s": statistics.median(runs["in_process"]),
    }
    tokens_per_batch = BATCH_SIZE * blocks.seq_len
    result["worker_batches_per_s"] = result["worker_tokens_per_s"] / tokens_per_batch
    result["in_process_batches_per_s"] = result["in_process_tokens_per_s"] / tokens_per_batch
    if train_step is not None:
        result["train_tokens_per_s"] = statistics.median(runs["train"])
        result["train_step_s"] = statistics.median(step_times)
        result["train_steps_timed"] = len(step_times)
        result["train_threads"] = train_threads
        result["ratio"] = result["worker_tokens_per_s"] / result["train_tokens_per_s"]
        result["target"] = PIPELINE_TARGET
        result["passed"] = result["ratio"] >= PIPELINE_TARGET
    return result


# ---------------------------------------------------------------------------------------------
# the corpus, tokenizer and token store


def prepare_store(corpus: str, work_dir: Path, vocab_size: int = VOCAB_SIZE) -> Config:
    """Tokenizer and token store of `corpus` in `work_dir` (trained and encoded once, then reused)."""
    validation = "null"  # builtin / other sources: hold out data.validation_fraction
    if not corpus.startswith(("builtin:", "hf:")):
        sibling = Path(corpus).with_name("valid.txt")
        if sibling.exists() and sibling != Path(corpus):
            validation = str(sibling)
    cfg = load_config(
        None,
        [
            f"data.train={corpus}",
            f"data.validation={validation}",
            f"train.run_dir={work_dir}",
            f"tokenizer.vocab_size={vocab_size}",
        ],
    )
    tokenize_corpus(cfg, quiet=True)
    return cfg


# ---------------------------------------------------------------------------------------------
# command line


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        default="builtin:python-docs",
        help="training text: a file (a valid.txt beside it is the validation text) or builtin:python-docs (default)",
    )
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="tokenizer + token store, reused")
    parser.add_argument("--blocks", type=int, default=None, help="blocks of 128 tokens per collator round (2048)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per figure (5)")
    parser.add_argument("--batches", type=int, default=None, help="micro-batches per pipeline round (200)")
    parser.add_argument("--train-steps", type=int, default=None, help="timed training steps per round (1)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the collator and in-process figures; 1 is what a "
        "DataLoader worker runs with (it sets 1 itself)",
    )
    parser.add_argument(
        "--train-threads",
        type=int,
        default=0,
        help="torch threads of the training step; 0: torch's default (what `mlmtrain pretrain` runs with)",
    )
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated: collator,pipeline")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test (not a measurement)")
    args = parser.parse_args(argv)
    sizes = {"blocks": (2048, 128), "rounds": (5, 1), "batches": (200, 8), "train_steps": (1, 1)}
    for name, (full, quick) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown or not args.sections:
        parser.error(f"--sections takes a comma-separated subset of {','.join(SECTIONS)} (got {unknown or 'none'})")
    return args


def main(argv: Optional[list[str]] = None) -> dict:
    argv = sys.argv[1:] if argv is None else list(argv)
    default_threads = torch.get_num_threads()
    args = parse_args(argv)
    train_threads = args.train_threads or default_threads
    command = shlex.join(["python", "scripts/bench_data.py", *argv])

    started = time.perf_counter()
    cfg = prepare_store(args.corpus, args.work_dir)
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    vocab = VocabInfo.from_tokenizer(tokenizer)
    store = TokenStore(cfg.store_dir, "train")
    blocks = StoreBlocks(store, SEQ_LEN, True, tokenizer.cls_token_id, tokenizer.sep_token_id)
    print(
        f"corpus {args.corpus}: store {cfg.store_dir}, {store.num_tokens:,} train tokens = {len(blocks):,} blocks of "
        f"{SEQ_LEN}; tokenizer {len(tokenizer):,} tokens; ready in {time.perf_counter() - started:.1f}s"
    )
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"command": command, "corpus": args.corpus, "threads": args.threads}

    if "collator" in args.sections:
        result = bench_collators(store_block_tensor(blocks, args.blocks), tokenizer, rounds=args.rounds)
        results["collator"] = result
        print(
            f"\n[collator] {result['blocks']} store blocks x {result['seq_len']} tokens, batch {result['batch_size']}, "
            f"torch threads {args.threads}, median of {result['rounds']} interleaved rounds"
        )
        print(f"  mlmtrain MaskingCollator:         {result['ours_blocks_per_s']:10.0f} masked blocks/s")
        print(f"  DataCollatorForLanguageModeling:  {result['hf_blocks_per_s']:10.0f} masked blocks/s")
        print(f"  ratio: {result['ratio']:.1f}x")

    if "pipeline" in args.sections:
        mini = load_config(MINI_CONFIG)
        train_step = MiniTrainStep(mini, vocab)
        result = bench_pipeline(
            blocks,
            vocab,
            train_step,
            batches=args.batches,
            rounds=args.rounds,
            train_steps=args.train_steps,
            train_warmup=1 if args.quick else 2,
            threads=args.threads,
            train_threads=train_threads,
        )
        results["pipeline"] = result
        tokens_per_batch = BATCH_SIZE * SEQ_LEN
        print(
            f"\n[pipeline] store -> StoreBlocks -> MicroBatches + MaskingCollator, micro-batch {BATCH_SIZE} x "
            f"{SEQ_LEN} = {tokens_per_batch} tokens, {result['batches_per_round']} micro-batches per round, "
            f"median of {result['rounds']} interleaved rounds"
        )
        print(
            f"  DataLoader, 1 worker:        {result['worker_batches_per_s']:8.1f} micro-batches/s "
            f"{result['worker_tokens_per_s']:12,.0f} tokens/s"
        )
        print(
            f"  in-process (num_workers=0):  {result['in_process_batches_per_s']:8.1f} micro-batches/s "
            f"{result['in_process_tokens_per_s']:12,.0f} tokens/s  (torch threads {args.threads})"
        )
        print(
            f"  mini training step (fp32, {train_step.parameters / 1e6:.1f}M parameters, vocab "
            f"{train_step.mlm.config.vocab_size}, sparse head, AdamW, torch threads {train_threads}): "
            f"{result['train_step_s'] * 1e3:.0f} ms/step = {result['train_tokens_per_s']:,.0f} tokens/s "
            f"(median of {result['train_steps_timed']} steps)"
        )
        print(f"  ratio pipeline (1 worker) / training: {result['ratio']:.1f}x")

    print("\nsummary")
    if "collator" in results:
        r = results["collator"]
        print(
            f"  collator vs HF:            {r['ratio']:7.1f}x  (target >= {r['target']:.0f}x)  "
            f"{'PASS' if r['passed'] else 'FAIL'}"
        )
    if "pipeline" in results:
        r = results["pipeline"]
        print(
            f"  pipeline vs mini training: {r['ratio']:7.1f}x  (target >= {r['target']:.0f}x)  "
            f"{'PASS' if r['passed'] else 'FAIL'}"
        )
    if args.quick:
        print("  (--quick: tiny sizes, a smoke test rather than a measurement)")
    print(f"  command: {command}")
    return results


if __name__ == "__main__":
    main()
