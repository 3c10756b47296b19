"""The speed sections: throughput (ours against the HF recipe) and limit (against the bare step) in interleaved
rounds with their MFU, precision (fp32 against bf16), and growth (the bare step by seq_len and model size)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from bench.contestants import run_ours, run_worker
from bench.cpu_limit import best_limit, cpu_mfu, limit_dtype, measure_cpu_limit, model_products
from bench.setup import HF_MLM_PROBABILITY, LABELS, Setup
from bench.stats import same_step, spread, steady_tokens_per_s
from mlmtrain.config import load_config
from mlmtrain.data.masking import VocabInfo, mean_rate
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.model.bert import flops_per_token
from mlmtrain.runtime.progress import say
from mlmtrain.train.objectives import objective_of
from mlmtrain.train.precision import cpu_bf16_support, cpu_vendor, resolve_precision

# Growth: seq_len varies at one size, size varies at one seq_len.
GROWTH = {"seq_lens": (128, 256, 512), "seq_size": "mini", "sizes": ("tiny", "mini", "small"), "size_seq": 128}


QUICK_GROWTH = {"seq_lens": (32, 64), "seq_size": "tiny", "sizes": ("tiny", "mini"), "size_seq": 32}


def _contestants(sections: set[str], cfg: Any) -> list[str]:
    """Who runs in the timed rounds: ours whenever there is a ratio to make, the peer and the limit on request, and
    with the peer, ours at the peer's masking rate where ours trains at another (the same objective's ratio)."""
    names = ["ours"]
    if "throughput" in sections:
        names.append("hf")
        if not _masks_as_hf(cfg.masking):
            names.append("equal")
    if "limit" in sections:
        names.append("bare")
    return names


def _masks_as_hf(masking: Any) -> bool:
    """Whether ours selects the HF recipe's share of the tokens at every step (its rate, no rate schedule)."""
    return masking.schedule == "constant" and abs(masking.mlm_probability - HF_MLM_PROBABILITY) < 1e-9


# ours at the HF recipe's masking rate: only the rate changes, the rest of ours' recipe stays as configured
EQUAL_MASKING = {
    "masking.mlm_probability": HF_MLM_PROBABILITY,
    "masking.schedule": "constant",
    "masking.mlm_probability_end": None,
}


def _throughput_run(setup: Setup, name: str, round_number: int) -> dict[str, Any]:
    """One timed run of one contestant: eval off, a step's metrics every step, a checkpoint only at the end."""
    a = setup.args
    run_dir = setup.run_dir(f"throughput-{name}-r{round_number}")
    timed = {"train.max_steps": a.steps, "train.log_every": 1, "train.eval_every": 0}
    if name == "ours":
        return run_ours(setup, run_dir, setup.ours(run_dir, extra=timed))
    if name == "equal":  # after ours' --set options, so that the rate is the HF recipe's whatever they say
        return run_ours(setup, run_dir, setup.ours(run_dir, extra=timed) + setup.overrides_of(EQUAL_MASKING))
    spec = {"config": str(setup.config_path()), "steps": a.steps, "warmup_steps": a.warmup_steps}
    if name == "hf":
        spec.update(mode="throughput", train_text=str(setup.train_text), hf_cache=str(setup.work_dir / "hf-datasets"))
        return run_worker("hf", dict(spec, overrides=setup.hf(run_dir)), run_dir)
    return run_worker("bare", dict(spec, overrides=setup.ours(run_dir)), run_dir)


def measure_rounds(setup: Setup, sections: set[str]) -> dict[str, Any]:
    """Sections 1 and 2: the contestants interleaved round after round, who goes first rotating each round."""
    a = setup.args
    cfg, hf_cfg, vocab, flops = _flop_count(setup)
    vocab_size = vocab.vocab_size
    names = _contestants(sections, cfg)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    products = model_products(cfg.model, vocab_size, a.batch * cfg.data.seq_len, cfg.masking.mlm_probability)
    limits = []  # on a CPU its limit, measured after every round: the best one counts, as a quiet moment allowed
    for round_number in range(1, a.rounds + 1):
        shift = (round_number - 1) % len(names)
        for name in names[shift:] + names[:shift]:
            say(f"benchmark: round {round_number}/{a.rounds}: {LABELS[name]}")
            runs[name].append(_throughput_run(setup, name, round_number))
        if setup.device == "cpu":
            limits.append(measure_cpu_limit(products))
    out: dict[str, Any] = {}
    for name in names:
        out[name] = dict(
            spread([steady_tokens_per_s(run["points"], a.warmup_steps) for run in runs[name]]),
            peak_rss_mb=max(run["process_peak_rss_mb"] for run in runs[name]),
            # the workers report the GPU's peak; `pretrain` does not tell its own
            peak_device_mb=_max_or_none([run.get("peak_device_mb") for run in runs[name]]),
        )
    out["ours"]["command"] = runs["ours"][0]["command"]
    if "hf" in out:
        out["ratio"] = out["ours"]["median"] / out["hf"]["median"]
        # the same objective's ratio: ours at the HF recipe's masking rate (ours itself where it trains at it)
        out["equal_ratio"] = out["equal" if "equal" in out else "ours"]["median"] / out["hf"]["median"]
        out["ours_masking"] = cfg.masking.mlm_probability
        if cfg.masking.schedule != "constant":
            out["ours_masking_end"] = cfg.masking.mlm_probability_end
        out["hf_masking"] = HF_MLM_PROBABILITY
    if "bare" in out:
        out["ours_over_limit"] = out["ours"]["median"] / out["bare"]["median"]
    limit = best_limit(limits) if limits else None
    out["mfu"] = model_flops_utilisation(setup, out, flops, limit)
    rows = _rows_path(setup, cfg, vocab)
    out["work"] = work_and_efficiency(setup, own_flops(cfg, hf_cfg, vocab_size, rows), out, limit)
    return out


def _max_or_none(values: list[Optional[float]]) -> Optional[float]:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def _flop_count(setup: Setup) -> tuple[Any, Any, VocabInfo, dict[str, float]]:
    """(our config, the HF recipe's, the tokenizer's vocabulary, each contestant's model FLOPs a token for its MFU): the
    sparse head's count at ours' rate for all but ours at the HF recipe's rate (there, at that rate), so that the
    shares compare."""
    cfg = load_config(setup.config_path(), setup.ours(setup.run_dir("flops")))
    hf_cfg = load_config(setup.config_path(), setup.hf(setup.run_dir("flops")))  # no --set: the HF side has none
    vocab = VocabInfo.from_tokenizer(load_tokenizer(cfg.tokenizer_dir))

    def model_flops(rate: float) -> float:
        return flops_per_token(cfg.model, vocab.vocab_size, cfg.data.seq_len, rate, sparse_head=True)

    ours = model_flops(mean_rate(cfg.masking))
    return cfg, hf_cfg, vocab, {"ours": ours, "bare": ours, "hf": ours, "equal": model_flops(HF_MLM_PROBABILITY)}


def own_flops(cfg: Any, hf_cfg: Any, vocab_size: int, rows: bool) -> dict[str, float]:
    """Training FLOPs a token each contestant's step runs: ours and the bare step with the sparse head and, with
    `rows` (`_rows_path`), the last layer on the selected rows, at ours' mean rate; ours at the HF recipe's rate the
    same way; the HF recipe's BertForMaskedLM (its own config: no --set) with its head on every position."""
    m, seq_len = cfg.model, cfg.data.seq_len

    def ours_at(rate: float) -> float:
        return flops_per_token(m, vocab_size, seq_len, rate, m.sparse_head, last_layer_on_rows=rows)

    hf = hf_cfg.model
    return {
        "ours": ours_at(mean_rate(cfg.masking)),
        "bare": ours_at(mean_rate(cfg.masking)),
        "equal": ours_at(HF_MLM_PROBABILITY),
        "hf": flops_per_token(hf, vocab_size, hf_cfg.data.seq_len, HF_MLM_PROBABILITY, sparse_head=False),
    }


def _rows_path(setup: Setup, cfg: Any, vocab: VocabInfo) -> bool:
    """Whether ours' loop runs the last layer on the selected rows (bert.py `selected_rows_only`), asked of the step
    module `pretrain` builds (its model family's own rules; a base's family with model.init_from), with what the run
    adds: packed blocks (no padding mask), documents only where the layers take them, and the CPU (CUDA keeps static
    shapes)."""
    objective = objective_of(cfg, vocab)
    module = objective.step_module(objective.build())
    if not (setup.device == "cpu" and cfg.data.packing and getattr(module, "last_layer_on_rows", False)):
        return False
    return module.sparse_head and (cfg.data.document_attention == "packed" or module.rows_take_documents)


def work_and_efficiency(
    setup: Setup, flops: dict[str, float], rounds: dict[str, Any], cpu_limit: Optional[dict[str, Any]]
) -> dict[str, Any]:
    """Where a tokens/s ratio comes from: each contestant's own FLOPs a token (`flops`, from `own_flops`), the
    FLOP/s they make of its tokens/s, and that as a share of a limit: on a CPU the measured limit of its precision,
    on a GPU --peak-tflops whatever the precision. ours / HF tokens/s = (HF FLOPs a token / ours') x (ours' FLOP/s /
    HF's): less work, and more FLOP/s."""
    names = [name for name in ("ours", "equal", "hf", "bare") if name in rounds]
    shares = model_flops_utilisation(setup, rounds, flops, cpu_limit)  # the same shares, of the own FLOPs
    out: dict[str, Any] = {
        "flops_per_token": {name: flops[name] for name in names},
        "flops_per_s": {name: flops[name] * rounds[name]["median"] for name in names},
        "share": {name: shares[name] for name in names},
    }
    if "hf" in rounds:
        for name in ("ours", "equal"):
            if name in rounds:
                out[f"{name}_less_work"] = flops["hf"] / flops[name]
                out[f"{name}_more_flops_per_s"] = out["flops_per_s"][name] / out["flops_per_s"]["hf"]
    return out


def model_flops_utilisation(
    setup: Setup, rounds: dict[str, Any], model_flops: dict[str, float], cpu_limit: Optional[dict[str, Any]]
) -> dict[str, Any]:
    """MFU = flops_per_token(sparse head) x tokens/s / peak FLOP/s, for every contestant measured: on a GPU against
    --peak-tflops, on a CPU against `cpu_limit`, the limit measured between the rounds (a GEMM of the model's
    shapes; a contestant in bf16 against the bf16 limit). `model_flops`: each contestant's count (`_flop_count`)."""
    out: dict[str, Any] = {"flops_per_token": model_flops["ours"]}
    names = [name for name in ("ours", "equal", "hf", "bare") if name in rounds]
    if cpu_limit is None:
        peak = setup.args.peak_tflops
        out |= {"formula": f"flops_per_token(sparse head) x tokens/s / ({peak:g} TFLOP/s)", "peak_tflops": peak}
        for name in names:
            out[name] = model_flops[name] * rounds[name]["median"] / (peak * 1e12)
        return out
    ours = limit_dtype(resolve_precision(setup.precision, torch.device("cpu")).name)
    dtypes = {"ours": ours, "equal": ours, "bare": ours, "hf": limit_dtype(setup.hf_precision)}
    out |= {"formula": "flops_per_token(sparse head) x tokens/s / CPU limit", "cpu_limit": cpu_limit, "limit_of": {}}
    for name in names:
        out["limit_of"][name] = dtypes[name]
        out[name] = cpu_mfu(model_flops[name], rounds[name]["median"], cpu_limit["gflops"][dtypes[name]])
    return out


def section_precision(setup: Setup) -> dict[str, Any]:
    """Section 6: ours in fp32 and in bf16 autocast (bf16-head on a CPU with AVX512-BF16 and no AMX, whether
    precision auto picks it there or not), same seed, same --recipe-steps steps: the speed-up, so that auto's
    choice on this machine is checked, and that learning per step is unchanged (validation perplexity at the same
    step within ~2 %)."""
    a = setup.args
    extra = {
        "optim.warmup_steps": max(1, a.recipe_steps // 10),
        "train.max_steps": a.recipe_steps,
        "train.log_every": 1,
        "train.eval_every": a.eval_every,
    }
    runs = {}
    auto = resolve_precision("auto", torch.device(setup.device)).name
    support = cpu_bf16_support() if setup.device == "cpu" else None
    other = "bf16-head" if auto == "bf16-head" or support == "avx512" else "bf16"
    for name in ("fp32", other):
        say(f"benchmark: precision: mlmtrain pretrain in {name}, {a.recipe_steps} steps")
        run_dir = setup.run_dir(f"precision-{name}")
        runs[name] = run_ours(setup, run_dir, setup.ours(run_dir, extra={**extra, "train.precision": name}))
    same = same_step(runs[other]["evals"], runs["fp32"]["evals"])
    rates = {name: steady_tokens_per_s(run["points"], a.warmup_steps) for name, run in runs.items()}
    return {
        "steps": a.recipe_steps,
        "other": other,
        "auto": auto,
        "cpu_bf16_support": support and f"{support} ({cpu_vendor() or 'vendor unknown'})",
        "tokens_per_s": rates,
        "speedup": rates[other] / rates["fp32"],
        "evals": {name: run["evals"] for name, run in runs.items()},
        "same_step": same and {"step": same["step"], "bf16_ppl": same["ours_ppl"], "fp32_ppl": same["hf_ppl"]},
    }


def growth_cells(quick: bool) -> list[tuple[str, int]]:
    grid = QUICK_GROWTH if quick else GROWTH
    cells = [(grid["seq_size"], seq_len) for seq_len in grid["seq_lens"]]
    cells += [(size, grid["size_seq"]) for size in grid["sizes"]]
    return list(dict.fromkeys(cells))  # the cell the two lines share runs once


def section_growth(setup: Setup) -> dict[str, Any]:
    """Section 8: the bare step's tokens/s and peak memory per (size, seq_len), one process each."""
    a = setup.args
    # the bare step has no loader to start: a few warm-up steps do (and seq 512 steps are long on a CPU)
    warmup_steps = min(a.warmup_steps, a.growth_steps // 2)
    rows = []
    for size, seq_len in growth_cells(a.quick):
        say(f"benchmark: growth: bare step, {size}, seq_len {seq_len}")
        run_dir = setup.run_dir(f"growth-{size}-{seq_len}")
        spec = {"config": str(setup.config_path(size)), "steps": a.growth_steps, "warmup_steps": warmup_steps}
        run = run_worker("bare", dict(spec, overrides=setup.ours(run_dir, seq_len=seq_len)), run_dir)
        rows.append(
            {
                "size": size,
                "seq_len": seq_len,
                "parameters": run["parameters"],
                "tokens_per_s": steady_tokens_per_s(run["points"], warmup_steps),
                "peak_device_mb": run.get("peak_device_mb"),
                "peak_rss_mb": run["process_peak_rss_mb"],
            }
        )
    return {"batch": a.batch, "steps": a.growth_steps, "warmup_steps": warmup_steps, "rows": rows}
