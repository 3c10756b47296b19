"""The whole command-line path on one device, as a user runs it, with its checks: tokenize -> pretrain (an
uninterrupted run, and a run killed with SIGKILL after its first checkpoint, then resumed) -> eval-perplexity ->
fill-mask -> transformers' Auto classes and fill-mask pipeline on the device -> an ELECTRA run -> torch.compile
with fixed-count masks (does it recompile per batch?).

    python scripts/end_to_end.py --device cuda --train path/to/train.txt      # on a GPU machine
    python scripts/end_to_end.py --quick                                      # tiny sizes, any device

It prints one line per check (PASS / FAIL / INFO) and exits 1 if a check failed. On a CPU the resumed run must
equal the uninterrupted one bit for bit; on a GPU some kernels (atomic adds in the embedding and sparse-head
backward) are not deterministic, so it reports how far the two drift apart and requires only that the losses agree
closely. Work files go to --work-dir (default runs/end-to-end), which it claims as its own and reuses.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
MARKER = ".mlmtrain-end-to-end"  # proves a --work-dir was made by this script (it replaces runs inside it)
CLOZE = "The capital of France is [MASK]."

# model and run sizes: (full, --quick)
SIZES = {
    "full": {
        "tokenizer.vocab_size": 8000,
        "data.seq_len": 128,
        "model.hidden_size": 256,
        "model.num_layers": 4,
        "model.num_heads": 4,
        "model.intermediate_size": 1024,
        "train.batch_size": 64,
        "train.max_steps": 300,
        "train.eval_every": 100,
        "checkpoint.save_every": 100,
        "optim.warmup_steps": 30,
    },
    "quick": {
        "tokenizer.vocab_size": 1000,
        "data.seq_len": 32,
        "model.hidden_size": 32,
        "model.num_layers": 2,
        "model.num_heads": 2,
        "model.intermediate_size": 64,
        "train.batch_size": 8,
        "train.max_steps": 24,
        "train.eval_every": 8,
        "checkpoint.save_every": 8,
        "optim.warmup_steps": 4,
    },
}


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def record(self, name: str, passed: Optional[bool], detail: str) -> None:
        verdict = "INFO" if passed is None else "PASS" if passed else "FAIL"
        if passed is False:
            self.failed.append(name)
        print(f"{verdict:4}  {name}: {detail}", flush=True)


def mlmtrain(*args: str, log: Path, env: Optional[dict] = None, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m mlmtrain ARGS`, its output appended to LOG and returned."""
    command = [sys.executable, "-m", "mlmtrain", *args]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=REPO)
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}   # {time.monotonic() - started:.1f} s, exit {done.returncode}\n")
        out.write(done.stdout + done.stderr + "\n")
    if check and done.returncode != 0:
        raise RuntimeError(f"mlmtrain {args[0]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def settings(args: argparse.Namespace, work: Path) -> list[str]:
    values: dict[str, Any] = {
        "data.train": args.train,
        "data.store": str(work / "tokens"),
        "tokenizer.path": str(work / "tokenizer"),
        "train.device": args.device,
        "train.log_every": 1,
        "train.progress": False,
        "checkpoint.keep_last": 0,
        "report.html": False,
        **SIZES["quick" if args.quick else "full"],
    }
    if args.valid:
        values["data.validation"] = args.valid
    return [part for key, value in values.items() for part in ("--set", f"{key}={value}")]


def losses(run_dir: Path, key: str = "loss") -> dict[int, float]:
    """`key` by step, from the run's metrics.jsonl."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {line["step"]: line[key] for line in lines if key in line}


def weight_drift(a: Path, b: Path) -> tuple[float, bool]:
    """Largest absolute difference over all weights of two checkpoints, and whether they are bit-identical."""
    import torch
    from safetensors.torch import load_file

    left, right = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert left.keys() == right.keys()
    drift = max((left[k].float() - right[k].float()).abs().max().item() for k in left)
    return drift, all(torch.equal(left[k], right[k]) for k in left)


def kill_after_first_checkpoint(run: list[str], run_dir: Path, log: Path, first: int) -> int:
    """Start pretrain, SIGKILL it once checkpoint step-FIRST is complete and a few more steps are logged."""
    command = [sys.executable, "-m", "mlmtrain", "pretrain", *run]
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}   # killed with SIGKILL after step-{first}\n")
        out.flush()
        process = subprocess.Popen(command, stdout=out, stderr=out, cwd=REPO)
    complete = run_dir / "checkpoints" / f"step-{first}" / "COMPLETE"
    deadline = time.monotonic() + 600
    while not (complete.exists() and max(losses(run_dir), default=0) >= first + 3):
        if process.poll() is not None:
            raise RuntimeError(f"pretrain ended (exit {process.returncode}) before the kill; see {log}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"no checkpoint step-{first} within 600 s; see {log}")
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    return process.wait()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    parser.add_argument("--train", default="builtin:python-docs", help="training text (default builtin:python-docs)")
    parser.add_argument("--valid", help="validation text (default: held out from --train)")
    parser.add_argument("--work-dir", default=str(REPO / "runs" / "end-to-end"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the script itself")
    args = parser.parse_args(argv)

    work = Path(args.work_dir).resolve()
    if work.exists() and any(work.iterdir()) and not (work / MARKER).exists():
        print(
            f"end_to_end: {work} holds files this script did not write; pass an empty or new --work-dir",
            file=sys.stderr,
        )
        return 2
    work.mkdir(parents=True, exist_ok=True)
    (work / MARKER).touch()
    log = work / "commands.log"
    log.write_text("")
    base = settings(args, work)
    size = SIZES["quick" if args.quick else "full"]
    first, last = size["checkpoint.save_every"], size["train.max_steps"]
    checks = Checks()

    import torch

    cuda = args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
    name = torch.cuda.get_device_name() if cuda else "cpu"
    checks.record("device", None, f"{name}; torch {torch.__version__}; python {sys.version.split()[0]}")

    started = time.monotonic()
    mlmtrain("tokenize", *base, log=log)
    checks.record("tokenize", True, f"tokenizer and token store in {time.monotonic() - started:.1f} s")

    whole, killed = work / "whole", work / "killed"
    started = time.monotonic()
    done = mlmtrain("pretrain", *base, "--set", f"train.run_dir={whole}", "--overwrite", log=log)
    seconds = time.monotonic() - started
    start_line = next((line for line in (done.stderr + done.stdout).splitlines() if line.startswith("pretrain:")), "")
    checks.record("pretrain", True, f"{last} steps in {seconds:.1f} s (process included); {start_line.strip()}")
    rates = losses(whole, "tokens_per_s")
    if rates:
        checks.record("pretrain speed", None, f"{rates[max(rates)]:,.0f} tokens/s at the last logged step")

    run = [*base, "--set", f"train.run_dir={killed}", "--overwrite"]
    code = kill_after_first_checkpoint(run, killed, log, first)
    killed_at = max(losses(killed))
    checks.record("kill -9", code == -signal.SIGKILL, f"exit {code} at step {killed_at}, after step-{first} was saved")
    mlmtrain("pretrain", *base, "--set", f"train.run_dir={killed}", "--resume", "auto", log=log)
    reference, resumed = losses(whole), losses(killed)
    same_steps = sorted(reference) == sorted(resumed)
    loss_drift = max(abs(reference[s] - resumed[s]) for s in reference) if same_steps else math.inf
    drift, identical = weight_drift(whole / "checkpoints" / f"step-{last}", killed / "checkpoints" / f"step-{last}")
    detail = (
        f"steps 1..{last} logged: {same_steps}; largest loss difference {loss_drift:.2e}; "
        f"largest weight difference {drift:.2e}; bit-identical: {identical}"
    )
    # CPU kernels are deterministic: exact. CUDA's atomic adds are not: the runs may drift apart by rounding.
    checks.record("resume equals uninterrupted", identical if not cuda else same_steps and loss_drift < 0.05, detail)

    model = whole / "checkpoints" / f"step-{last}"
    data = args.valid or args.train
    report = mlmtrain("eval-perplexity", "--model", str(model), "--data", data, "--json", "--max-blocks", "64",
                      "--device", args.device, log=log)  # fmt: skip
    scores = json.loads(report.stdout)
    checks.record(
        "eval-perplexity",
        math.isfinite(scores["perplexity"]),
        f"perplexity {scores['perplexity']:.1f}, accuracy {scores['accuracy']:.3f} on {scores['masked_tokens']} "
        f"masked tokens, {scores['seconds']:.2f} s",
    )
    filled = mlmtrain("fill-mask", "--model", str(model), "--device", args.device, "--top-k", "3", CLOZE, log=log)
    checks.record("fill-mask (CLI)", bool(filled.stdout.strip()), " | ".join(filled.stdout.split("\n")[:4]))

    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    device = torch.device(("cuda" if args.device == "auto" else args.device) if cuda else "cpu")
    mlm = AutoModelForMaskedLM.from_pretrained(str(model), trust_remote_code=False).to(device)
    tokenizer = AutoTokenizer.from_pretrained(str(model), trust_remote_code=False)
    answers = pipeline("fill-mask", model=str(model), device=device, trust_remote_code=False)(CLOZE, top_k=3)
    batch = tokenizer([CLOZE], return_tensors="pt").to(device)
    with torch.no_grad():
        logits = mlm(**batch).logits
    checks.record(
        "transformers on the device",
        logits.device.type == device.type and bool(torch.isfinite(logits).all()),
        f"{type(mlm).__name__} on {logits.device}; pipeline: {[a['token_str'] for a in answers]}",
    )

    electra = work / "electra"
    mlmtrain(
        "pretrain",
        *base,
        "--set",
        f"train.run_dir={electra}",
        "--set",
        "train.objective=electra",
        "--set",
        f"train.max_steps={first}",
        "--overwrite",
        log=log,
    )
    electra_losses = losses(electra)
    checks.record(
        "ELECTRA pretrain",
        all(map(math.isfinite, electra_losses.values())),
        f"{len(electra_losses)} steps, last loss {electra_losses[max(electra_losses)]:.3f}",
    )

    compiled = work / "compiled"
    done = mlmtrain(
        "pretrain",
        *base,
        "--set",
        f"train.run_dir={compiled}",
        "--set",
        "train.compile=true",
        "--set",
        "masking.fixed_count=true",
        "--set",
        f"train.max_steps={first}",
        "--overwrite",
        log=log,
        env={"TORCH_LOGS": "recompiles"},
    )
    # "[frame/n] [__recompiles] Recompiling function …": a frame's nth recompilation. k of fixed-count masking is
    # per row (fewer maskable tokens in rows with more documents), so the selected count can change once: torch
    # then marks that size dynamic and compiles once more. More than one per frame would be a recompile per batch.
    recompiles = [(int(f), int(n)) for f, n in re.findall(r"\[(\d+)/(\d+)\] \[__recompiles\] Recompiling", done.stderr)]
    per_frame = max((n for _, n in recompiles), default=0)
    compiled_losses = losses(compiled)
    checks.record(
        "torch.compile, fixed-count masks",
        per_frame <= 1 and all(map(math.isfinite, compiled_losses.values())),
        f"{len(compiled_losses)} steps; {len(recompiles)} recompilation(s) after the first compile, at most "
        f"{per_frame} per compiled frame",
    )

    print(
        f"\n{len(checks.failed)} check(s) failed{': ' + ', '.join(checks.failed) if checks.failed else ''}; "
        f"commands and their output: {log}"
    )
    return 1 if checks.failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as error:  # a command failed: its output is in the message and in commands.log
        print(f"end_to_end: {error}", file=sys.stderr)
        sys.exit(1)
