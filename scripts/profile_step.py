"""Where a training step's time goes: `train_step` (the loop's own step, on the training setup `pretrain` builds) under
torch.profiler, on micro-batches fetched beforehand, as the benchmark's bare step runs it.

    python scripts/profile_step.py --device cuda --size base --batch 256 --seq-len 128          # on a GPU
    python scripts/profile_step.py --device cuda --size base --batch 256 --set train.compile=true
    python scripts/profile_step.py --quick                                                    # tiny, any device
    python scripts/profile_step.py --device cuda --size base --batch 256 \
        --variant "" --variant model.dropout=0 --variant model.dropout=0,train.compile=true     # compare settings

It prints the step's wall time, tokens/s and (on a GPU) model FLOPs utilisation; how much of the wall time the GPU
was busy running kernels; the host synchronisations per step (each one lets the GPU run dry while Python queues
the next kernels); and the operators that took the most time. The trace goes to --out/trace.json (open it in
Perfetto or chrome://tracing). Tokenizer and token store are built in --work-dir and reused.

With --variant (repeated; each a comma-separated list of KEY=VALUE on top of --set, "" for none) every variant is
measured in turn in one process, each printed as it finishes, and a table compares them at the end (also written to
--out/variants.json); the trace is the first variant's. Besides config keys a variant (or --set) may hold
sdpa=BACKEND (flash, cudnn, efficient or math): the steps run inside torch.nn.attention.sdpa_kernel(BACKEND), which
fixes the attention kernel that scaled_dot_product_attention (and, under train.compile, the traced graph) uses.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional

import torch
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))  # mlmtrain from this checkout, installed or not

from mlmtrain.config import load_config  # noqa: E402
from mlmtrain.data.store import tokenize_corpus  # noqa: E402
from mlmtrain.model.bert import H200_DENSE_BF16_TFLOPS, flops_per_token  # noqa: E402
from mlmtrain.runtime.distributed import init_distributed  # noqa: E402
from mlmtrain.train.step import build_setup, train_step  # noqa: E402

QUICK = {
    "model.hidden_size": 32,
    "model.num_layers": 2,
    "model.num_heads": 2,
    "model.intermediate_size": 64,
    "tokenizer.vocab_size": 1000,
}


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--size", default="mini", help="configs/<size>.yaml (default mini)")
    add("--seq-len", type=int, default=128)
    add("--batch", type=int, default=32, help="sequences per step")
    add("--precision", default="auto", choices=("auto", "fp32", "bf16", "bf16-head"))
    add("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    add("--vocab-size", type=int, default=30522)
    add("--train", default="builtin:python-docs", help="training text (default builtin:python-docs)")
    add("--warmup", type=int, default=5, help="steps before profiling (compilation, allocator, cuDNN choices)")
    add("--steps", type=int, default=10, help="profiled steps")
    add("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, e.g. train.compile=true")
    add("--peak-tflops", type=float, default=H200_DENSE_BF16_TFLOPS, help="peak for MFU (default H200 dense bf16)")
    add("--variant", action="append", default=[], metavar="K=V[,K=V...]", help="settings to compare (see above)")
    add("--top", type=int, default=15, help="operators to list")
    add("--work-dir", default=str(REPO / "runs" / "profile"))
    add("--out", default=str(REPO / "results" / "profile"))
    add("--quick", action="store_true", help="a tiny model, seq 32, batch 8, 2 + 3 steps: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.seq_len, args.batch, args.warmup, args.steps = 32, 8, 2, 3
    return args


def overrides(args: argparse.Namespace) -> list[str]:
    work = Path(args.work_dir)
    vocab = QUICK["tokenizer.vocab_size"] if args.quick else args.vocab_size
    values: dict[str, Any] = {
        "data.train": args.train,
        "data.seq_len": args.seq_len,
        "data.num_workers": 0,  # the micro-batches are fetched before the clock starts
        "tokenizer.vocab_size": vocab,
        "tokenizer.path": work / f"tokenizer-v{vocab}",
        "data.store": work / f"tokens-v{vocab}-s{args.seq_len}",
        "train.batch_size": args.batch,
        "train.precision": args.precision,
        "train.device": args.device,
        "train.run_dir": work / "run",
        "train.progress": False,
        **(QUICK if args.quick else {}),
    }
    return [f"{key}={value}" for key, value in values.items()]


SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}


def attention_kernel(changes: list[str]) -> tuple[list[str], Any]:
    """`changes` less any sdpa=BACKEND, and the context the steps run in (sdpa_kernel(BACKEND), else none)."""
    kept, backend = [], None
    for change in changes:
        key, _, value = change.partition("=")
        if key.strip() != "sdpa":
            kept.append(change)
        elif value.strip() not in SDPA_BACKENDS:
            raise SystemExit(f"profile_step: sdpa={value} is not one of {', '.join(SDPA_BACKENDS)}")
        else:
            backend = value.strip()
    if backend is None:
        return kept, nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return kept, sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[backend]))


def attention_name(figures: dict[str, Any]) -> str:
    """The attention kernels a variant ran, by the backend names of sdpa=: e.g. "cudnn", "flash", "math"."""
    names = {name for op in figures["attention_ops"] for name in SDPA_BACKENDS if name in op}
    return "+".join(sorted(names)) or "-"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_time(event: Any) -> float:
    """An averaged event's own device time in µs (the attribute's name changed across torch versions)."""
    return getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)


def measure(args: argparse.Namespace, changes: list[str], trace: bool) -> dict[str, Any]:
    """Build the training setup for --set plus `changes`, warm up, profile --steps steps, time --steps more without the
    profiler; print the figures and the operator table; return the figures."""
    config_changes, kernel = attention_kernel(list(args.set) + changes)
    cfg = load_config(REPO / "configs" / f"{args.size}.yaml", overrides(args) + config_changes)
    tokenize_corpus(cfg, quiet=True)
    with kernel:
        return _measure(args, changes, trace, cfg)


def _measure(args: argparse.Namespace, changes: list[str], trace: bool, cfg: Any) -> dict[str, Any]:
    setup = build_setup(cfg, init_distributed(cfg.train.device))
    device = setup.ctx.device
    fetched = [[next(setup.batches) for _ in range(setup.layout.accum_steps)] for _ in range(4)]
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    start = time.perf_counter()
    for step in range(args.warmup):
        train_step(setup, fetched[step % len(fetched)], clock=lambda: 0.0)
    synchronize(device)
    warmup = time.perf_counter() - start  # with train.compile: mostly compilation
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for step in range(args.steps):
            train_step(setup, fetched[step % len(fetched)], clock=lambda: 0.0)
        synchronize(device)
        wall = (time.perf_counter() - start) / args.steps
    # the profiler's own overhead lengthens the profiled steps: time a few more without it
    start = time.perf_counter()
    for step in range(args.steps):
        train_step(setup, fetched[step % len(fetched)], clock=lambda: 0.0)
    synchronize(device)
    clean = (time.perf_counter() - start) / args.steps

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if trace:
        prof.export_chrome_trace(str(out / "trace.json"))
    events = prof.key_averages()
    settings = ", ".join(list(args.set) + changes) or "no --set"
    figures: dict[str, Any] = {
        "settings": settings,
        "step_ms": clean * 1e3,
        "tokens_per_s": tokens_per_step / clean,
        "warmup_s": warmup,
        "precision": setup.precision.name,
    }
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
          f"torch {torch.__version__}; {args.size}, seq {cfg.data.seq_len}, batch {cfg.train.batch_size}, "
          f"{setup.precision.name}; {settings}")  # fmt: skip
    # which attention kernel ran: a fused one (flash, cuDNN, efficient) or the math path's matmuls and softmax
    figures["attention_ops"] = sorted({e.key for e in events if "scaled_dot_product" in e.key})
    print(f"step: {clean * 1e3:.1f} ms without the profiler ({wall * 1e3:.1f} ms with it), "
          f"{figures['tokens_per_s']:,.0f} tokens/s; {args.warmup} warm-up steps took {warmup:.1f} s")  # fmt: skip
    print("attention operators: " + (", ".join(figures["attention_ops"]) or "none (compiled into other kernels)"))
    if device.type == "cuda":
        flops = flops_per_token(
            cfg.model, len(setup.tokenizer), cfg.data.seq_len, cfg.masking.mlm_probability, cfg.model.sparse_head
        )
        figures["mfu"] = flops * tokens_per_step / clean / (args.peak_tflops * 1e12)
        print(f"MFU: {figures['mfu']:.1%} (flops_per_token {flops:.4g}, peak {args.peak_tflops:g} TFLOP/s)")
        # kernels of one stream do not overlap: their summed time is the time the GPU was busy
        busy = sum(device_time(e) for e in events if e.device_type.name == "CUDA") / 1e6 / args.steps
        figures["gpu_busy_share"] = busy / wall
        print(f"GPU busy: {busy * 1e3:.1f} ms a step, {busy / wall:.0%} of the profiled step's wall time")
        syncs = {e.key: e.count / args.steps for e in events if "Synchronize" in e.key or e.key == "cudaMemcpyAsync"}
        figures["syncs"] = syncs
        print("host synchronisations a step: " + (", ".join(f"{k} {v:g}" for k, v in sorted(syncs.items())) or "none"))
        figures["peak_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        sort = "self_cuda_time_total" if not hasattr(events[0], "self_device_time_total") else "self_device_time_total"
    else:
        sort = "self_cpu_time_total"
    print(events.table(sort_by=sort, row_limit=args.top, max_name_column_width=60))
    if trace:
        print(f"trace: {out / 'trace.json'}")
    del setup, fetched, prof, events
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()  # the next variant compiles afresh (and its recompilations are its own)
    return figures


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    variants = [[change for change in variant.split(",") if change.strip()] for variant in args.variant] or [[]]
    results = []
    for index, changes in enumerate(variants):
        results.append(measure(args, changes, trace=index == 0))
        sys.stdout.flush()
    if len(variants) > 1:
        out = Path(args.out)
        (out / "variants.json").write_text(json.dumps(results, indent=1))
        print("| variant | ms/step | tokens/s | MFU | GPU busy | peak MiB | warm-up s | attention |")
        print("|---|---|---|---|---|---|---|---|")
        for row in results:
            mfu, busy = row.get("mfu"), row.get("gpu_busy_share")
            print(f"| {row['settings']} | {row['step_ms']:.1f} | {row['tokens_per_s']:,.0f} | "
                  f"{'-' if mfu is None else f'{mfu:.1%}'} | {'-' if busy is None else f'{busy:.0%}'} | "
                  f"{row.get('peak_memory_mib', 0):,.0f} | {row['warmup_s']:.1f} | "
                  f"{attention_name(row)} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
