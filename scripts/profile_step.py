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

With --parts the step's CPU time is split into its parts (data wait, attention, GELU, LayerNorm, dropout, the
head's decoder and loss, the other linear layers, embeddings, gradient clipping, the optimizer, the rest), in ms a
step: the steps then take their micro-batches from the run's own loader (the config's data.num_workers), so waiting
for data counts. --hf profiles the HF Trainer recipe (`scripts/benchmark.py`'s, dense head, dropout 0.1, its masking
in the main process) the same way, on the same tokenizer, store and text, for the table of both sides:

    python scripts/profile_step.py --size mini --precision fp32 --parts --hf --train corpus/train.txt

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
sys.path.insert(0, str(REPO / "scripts"))  # the benchmark's HF recipe (bench.workers), for --hf

from mlmtrain.config import load_config  # noqa: E402
from mlmtrain.data.store import tokenize_corpus  # noqa: E402
from mlmtrain.data.tokenizer import load_tokenizer  # noqa: E402
from mlmtrain.model.bert import H200_DENSE_BF16_TFLOPS, flops_per_token, padded_vocab_size  # noqa: E402
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
    add("--parts", action="store_true", help="CPU time a step per part (attention, GELU, LayerNorm, head, ...)")
    add("--hf", action="store_true", help="with --parts: also profile the HF Trainer recipe, and compare")
    add("--quick", action="store_true", help="a tiny model, seq 32, batch 8, 2 + 3 steps: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.seq_len, args.batch, args.warmup, args.steps = 32, 8, 2, 3
    if args.hf and not args.parts:
        parser.error("--hf compares the parts of a step: give --parts too")
    return args


def overrides(args: argparse.Namespace) -> list[str]:
    work = Path(args.work_dir)
    vocab = QUICK["tokenizer.vocab_size"] if args.quick else args.vocab_size
    values: dict[str, Any] = {
        "data.train": args.train,
        "data.seq_len": args.seq_len,
        **({} if args.parts else {"data.num_workers": 0}),  # else the micro-batches are fetched before the clock starts
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


def micro_batches(args: argparse.Namespace, setup: Any, fetched: list[Any], step: int) -> list[dict[str, torch.Tensor]]:
    """The step's micro-batches: from the run's loader with --parts (its wait counts), else fetched beforehand."""
    if args.parts:
        return [next(setup.batches) for _ in range(setup.layout.accum_steps)]
    return fetched[step % len(fetched)]


def _measure(args: argparse.Namespace, changes: list[str], trace: bool, cfg: Any) -> dict[str, Any]:
    setup = build_setup(cfg, init_distributed(cfg.train.device))
    device = setup.ctx.device
    fetched = [[next(setup.batches) for _ in range(setup.layout.accum_steps)] for _ in range(4)]
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    start = time.perf_counter()
    for step in range(args.warmup):
        train_step(setup, micro_batches(args, setup, fetched, step), clock=lambda: 0.0)
    synchronize(device)
    warmup = time.perf_counter() - start  # with train.compile: mostly compilation
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=args.parts) as prof:
        start = time.perf_counter()
        for step in range(args.steps):
            train_step(setup, micro_batches(args, setup, fetched, step), clock=lambda: 0.0)
        synchronize(device)
        wall = (time.perf_counter() - start) / args.steps
    # the profiler's own overhead lengthens the profiled steps: time a few more without it
    start = time.perf_counter()
    for step in range(args.steps):
        train_step(setup, micro_batches(args, setup, fetched, step), clock=lambda: 0.0)
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
    if args.parts:
        figures["parts"] = step_parts(
            prof.events(), padded_vocab_size(len(setup.tokenizer), cfg.model.pad_vocab_multiple)
        )
        figures["parts"] = {name: ms / args.steps for name, ms in figures["parts"].items()}
        print_parts({"ours": figures["parts"]}, {"ours": clean * 1e3})
    if trace:
        print(f"trace: {out / 'trace.json'}")
    del setup, fetched, prof, events
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()  # the next variant compiles afresh (and its recompilations are its own)
    return figures


# The parts of a step, in the order the table lists them; "head" is the masked-LM decoder and its loss (the head's
# small transform counts with the linear layers, GELU and LayerNorm).
PARTS = (
    "data wait",
    "attention",
    "GELU",
    "LayerNorm",
    "dropout",
    "head",
    "linear layers",
    "embeddings",
    "clip",
    "optimizer",
    "other",
)
# An operator inside one of these ranges belongs to its part, whatever it is
ENCLOSING = (("enumerate(dataloader)", "data wait"), ("optimizer.", "optimizer"), ("_decodercrossentropy", "head"))
# Else the first part whose word is in the operator's name (lower case, no underscores), itself or its nearest
# enclosing operator that has one: a backward node names its forward ("GeluBackward0")
BY_NAME = (
    ("crossentropy", "head"),
    ("logsoftmax", "head"),
    ("nllloss", "head"),
    ("scaleddotproduct", "attention"),
    ("gelu", "GELU"),
    ("layernorm", "LayerNorm"),
    ("dropout", "dropout"),
    ("bernoulli", "dropout"),
    ("embedding", "embeddings"),
    ("clipgrad", "clip"),
    ("vectornorm", "clip"),
    ("foreachnorm", "clip"),
)
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul", "aten::addmm_")


def _own_part(event: Any, vocab: int) -> Optional[str]:
    """The part an operator's own name (and, for a product, its shapes: one side of vocabulary size is the
    decoder's) says, or None."""
    name = event.name.lower().replace("_", "")
    for word, part in BY_NAME:
        if word in name:
            return part
    if event.name in MATMULS or name.startswith(("mmbackward", "addmmbackward", "linearbackward")):
        shapes = getattr(event, "input_shapes", None) or []
        return "head" if any(vocab in shape for shape in shapes if shape) else "linear layers"
    return None


def part_of(event: Any, vocab: int) -> str:
    """An operator's part: an enclosing range's (data loading, the optimizer, the fused head) first, else its own
    or its nearest enclosing operator's, else "other"."""
    chain, node = [], event
    while node is not None:
        chain.append(node)
        node = node.cpu_parent
    for node in chain:
        lowered = node.name.lower()
        for word, part in ENCLOSING:
            if lowered.startswith(word) or word in lowered.replace(" ", ""):
                return part
    for node in chain:
        part = _own_part(node, vocab)
        if part is not None:
            return part
    return "other"


def step_parts(events: Any, vocab: int) -> dict[str, float]:
    """Self CPU time (ms) of the profiled events by part: self times add up to the CPU time of the whole."""
    totals = dict.fromkeys(PARTS, 0.0)
    for event in events:
        if event.device_type.name == "CPU":
            totals[part_of(event, vocab)] += event.self_cpu_time_total / 1e3
    return totals


def print_parts(parts: dict[str, dict[str, float]], steps_ms: dict[str, float]) -> None:
    """The parts table: ms a step and share of the step's CPU time, one pair of columns per side."""
    sides = list(parts)
    print("| part | " + " | ".join(f"{side} ms/step | {side} share" for side in sides) + " |")
    print("|---|" + "---|---|" * len(sides))
    for name in (*PARTS, "CPU time"):
        cells = []
        for side in sides:
            total = sum(parts[side].values())
            ms = total if name == "CPU time" else parts[side][name]
            cells += [f"{ms:,.1f}", f"{ms / total:.1%}" if total else "-"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("wall time a step without the profiler: " + ", ".join(f"{s} {ms:,.1f} ms" for s, ms in steps_ms.items()))
    print("(CPU time adds every thread's busy time, so on several cores it can exceed the wall time)")


class ProfiledSteps:
    """A Trainer callback (made a TrainerCallback in `measure_hf`) that advances the profiler's schedule and stamps
    every step's end."""

    def __init__(self, prof: Any) -> None:
        self.prof, self.ends = prof, []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.prof.step()
        self.ends.append(time.perf_counter())


def measure_hf(args: argparse.Namespace) -> tuple[dict[str, float], float]:
    """The HF recipe's step parts (ms a step) and its wall time a step without the profiler: its Trainer as the
    benchmark runs it, --warmup steps, --steps profiled, --steps more timed."""
    from bench.setup import CLASSIC_RECIPE, text_files
    from bench.workers import hf_worker
    from torch.profiler import schedule
    from transformers import TrainerCallback

    work = Path(args.work_dir)
    train_text, _ = text_files(args.train, None, work)
    precision = "bf16" if args.precision == "bf16" else "fp32"  # the recipe's --bf16, or its default
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    recipe = {"train.precision": precision, "train.device": device, "model.dropout": CLASSIC_RECIPE["model.dropout"]}
    spec = {
        "config": str(REPO / "configs" / f"{args.size}.yaml"),
        "overrides": overrides(args) + [f"{key}={value}" for key, value in recipe.items()],
        "mode": "throughput",
        "steps": args.warmup + 2 * args.steps,
        "warmup_steps": 0,
        "train_text": str(train_text),
        "hf_cache": str(work / "hf-datasets"),
        "run_dir": str(work / "hf-run"),
    }
    steps = schedule(wait=max(args.warmup - 1, 0), warmup=1, active=args.steps, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=steps) as prof:
        clock = type("ProfiledTrainerSteps", (ProfiledSteps, TrainerCallback), {})(prof)
        hf_worker(spec, callbacks=(clock,))
    cfg = load_config(spec["config"], spec["overrides"])
    vocab = padded_vocab_size(len(load_tokenizer(cfg.tokenizer_dir)), cfg.model.pad_vocab_multiple)
    parts = {name: ms / args.steps for name, ms in step_parts(prof.events(), vocab).items()}
    return parts, (clock.ends[-1] - clock.ends[-1 - args.steps]) / args.steps * 1e3


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    variants = [[change for change in variant.split(",") if change.strip()] for variant in args.variant] or [[]]
    results = []
    for index, changes in enumerate(variants):
        results.append(measure(args, changes, trace=index == 0))
        sys.stdout.flush()
    if args.hf:
        hf_parts, hf_ms = measure_hf(args)
        print_parts({"ours": results[0]["parts"], "hf": hf_parts}, {"ours": results[0]["step_ms"], "hf": hf_ms})
        results[0]["hf"] = {"parts": hf_parts, "step_ms": hf_ms}
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "parts.json").write_text(json.dumps(results[0], indent=1))
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
