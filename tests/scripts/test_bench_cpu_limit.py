"""scripts/bench/cpu_limit.py and its report lines: the CPU limit (the matrix-product FLOP/s of the model's own
shapes, measured) and each contestant's model FLOPs per second as a share of it (CPU MFU)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from bench.cpu_limit import Product, best_limit, cpu_mfu, limit_dtype, limit_flops_per_s, model_products, time_products
from bench.report import markdown
from bench.speed import _contestants, _rows_path, own_flops, work_and_efficiency
from bench.verdicts import Verdict

from mlmtrain.config import ModelConfig
from mlmtrain.data.masking import VocabInfo
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.model.bert import flops_per_token

MINI = ModelConfig(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024)


def test_the_limit_weighs_each_product_as_often_as_a_step_runs_it() -> None:
    small = Product("small", 10, 10, 10, per_forward=3)  # 2,000 FLOPs, 1 s each
    large = Product("large", 100, 10, 10, per_forward=1)  # 20,000 FLOPs in 2 s
    # 3 x 2,000 + 20,000 FLOPs in 3 x 1 + 2 seconds
    assert limit_flops_per_s([small, large], {"small": 1.0, "large": 2.0}) == pytest.approx(26_000 / 5)


def test_the_products_are_the_model_flop_count_less_attention_scores_and_the_head_transform() -> None:
    """Times 3 (forward and backward), the products per token are `flops_per_token`'s matrix products (to the
    rounding of the selected rows) but for the attention scores (no weights: not a GEMM of the model's shapes) and
    the head's small transform."""
    tokens, rate, vocab = 32 * 128, 0.4, 30522
    products = model_products(MINI, vocab, tokens, rate)
    per_token = 3 * sum(p.flops * p.per_forward for p in products) / tokens
    hidden, seq = MINI.hidden_size, 128
    left_out = 6 * (MINI.num_layers * 2 * seq * hidden + rate * hidden * hidden)
    assert per_token == pytest.approx(flops_per_token(MINI, vocab, seq, rate, sparse_head=True) - left_out, rel=1e-3)
    assert {p.name: (p.rows, p.inner, p.columns) for p in products}["decoder"] == (1638, 256, 30522)


def test_cpu_mfu_is_model_flops_per_second_over_the_limit_of_the_side_precision() -> None:
    assert cpu_mfu(4e7, 5_000.0, 400.0) == pytest.approx(4e7 * 5_000 / 400e9)
    assert cpu_mfu(4e7, 5_000.0, None) is None  # no bf16 limit on a CPU without bf16
    assert [limit_dtype(name) for name in ("fp32", "bf16", "bf16-head")] == ["fp32", "bf16", "fp32"]


def test_the_limit_of_several_rounds_is_each_precision_best() -> None:
    """Measured after each round on a shared machine: a busy moment lowers one measurement, not the limit."""
    rounds = [{"gflops": {"fp32": 300.0, "bf16": None}, "threads": 2, "products": []}]
    rounds.append({"gflops": {"fp32": 120.0, "bf16": None}, "threads": 2, "products": []})
    assert best_limit(rounds) == {
        "gflops": {"fp32": 300.0, "bf16": None},
        "threads": 2,
        "products": [],
        "measurements": 2,
    }


def test_time_products_times_each_product() -> None:
    seconds = time_products([Product("p", 8, 8, 8, 1)], torch.float32, repeats=2)
    assert seconds.keys() == {"p"} and seconds["p"] > 0


def test_the_report_prints_the_cpu_limit_both_mfus_and_where_each_ratio_comes_from() -> None:
    machine = {"cpu": "Some CPU", "cpu_count": 2, "memory_gib": 24.0, "torch_threads": 2, "platform": "Linux-6"}
    settings = {"size": "mini", "seq_len": 128, "batch": 32, "precision": "fp32 (fp32)", "device": "cpu", "steps": 30}
    settings |= {"warmup_steps": 5, "rounds": 3, "vocab_size": 30522, "train_text": "train.txt", "set": []}
    side = {"median": 6000.0, "min": 5900.0, "max": 6100.0, "peak_rss_mb": 1500.0, "peak_device_mb": None}
    limit = {
        "gflops": {"fp32": 500.0, "bf16": 1500.0},
        "threads": 2,
        "products": ["decoder [1638, 256] x [256, 30522] x1"],
        "measurements": 3,
    }
    rounds = {
        "ours": side,
        "equal": dict(side, median=8000.0),
        "hf": dict(side, median=2000.0),
        "bare": dict(side, median=6100.0),
        "ratio": 3.0,
        "equal_ratio": 4.0,
        "ours_masking": 0.4,
        "hf_masking": 0.15,
        "ours_over_limit": 6000 / 6100,
        "mfu": {"formula": "f", "flops_per_token": 4e7, "cpu_limit": limit, "ours": 0.48, "hf": 0.16, "bare": 0.488},
        "work": {
            "flops_per_token": {"ours": 3.7e7, "equal": 2.4e7, "hf": 6.8e7, "bare": 3.7e7},
            "share": {"ours": 0.444, "equal": 0.384, "hf": 0.272, "bare": 0.4514},
            "ours_less_work": 6.8 / 3.7,
            "ours_more_flops_per_s": 0.444 / 0.272,
            "equal_less_work": 6.8 / 2.4,
            "equal_more_flops_per_s": 0.384 / 0.272,
        },
    }
    results = {
        "created": "2026-12-03T06:00:00+0000",
        "source": {"commit": "a" * 40, "uncommitted_changes": False},
        "command": "python scripts/benchmark.py --sections throughput,limit --precision fp32",
        "machine": machine | {"python": "3.11.7", "versions": {"torch": "2.13.0"}},
        "settings": settings,
        "rounds": rounds,
        "verdicts": [Verdict("throughput at the HF recipe's masking rate: ours / HF recipe", 4.0, ">=", 3.0)],
    }
    text = markdown(results)
    assert "CPU limit: 500 GFLOP/s fp32 (1,500 bf16): the model's matrix products (decoder " in text
    assert "on 2 torch threads, best of 3 measurements (one after each round)" in text
    assert (
        "ours / HF recipe 3.00x tokens/s, 40 % masked (MFU ours 48%, HF recipe 16%); 4.00x at the HF recipe's 15 % "
        "masked; ours / bare step 98.4 %" in text
    )
    assert (
        "| mlmtrain pretrain at the HF recipe's masking rate | 8,000 | 5,900–6,100 | 1,500 | – | – | 24.0 | 38.4% |"
        in text
    )
    assert (
        "Where the ratio comes from, ours against the HF recipe: as ours trains, 37.0 against 68.0 MFLOPs a token: "
        "1.84x less work at 1.63x the FLOP/s (44.4% and 27.2% of the limit); at the HF recipe's masking rate, 24.0 "
        "against 68.0 MFLOPs a token: 2.83x less work at 1.41x the FLOP/s (38.4% and 27.2% of the limit)" in text
    )
    limit["gflops"]["bf16"] = None
    assert "CPU limit: 500 GFLOP/s fp32 (no bf16 on this CPU)" in markdown(results)


def test_ours_at_the_hf_recipes_masking_rate_runs_only_where_ours_trains_at_another() -> None:
    def config(rate: float, schedule: str = "constant") -> SimpleNamespace:
        return SimpleNamespace(masking=SimpleNamespace(mlm_probability=rate, schedule=schedule))

    sections = {"throughput", "limit"}
    assert _contestants(sections, config(0.4)) == ["ours", "hf", "equal", "bare"]
    assert _contestants(sections, config(0.15)) == ["ours", "hf", "bare"]
    assert _contestants(sections, config(0.15, "linear")) == ["ours", "hf", "equal", "bare"]  # a rate that moves
    assert _contestants({"limit"}, config(0.4)) == ["ours", "bare"]  # no HF recipe, no ratio to make


def _config(rate: float = 0.4, schedule: str = "constant", end=None, **data) -> SimpleNamespace:
    masking = SimpleNamespace(mlm_probability=rate, schedule=schedule, mlm_probability_end=end)
    data = SimpleNamespace(**({"seq_len": 128, "document_attention": "packed", "packing": True} | data))
    return SimpleNamespace(model=MINI, masking=masking, data=data)


def test_own_flops_count_the_last_layer_on_rows_where_the_loop_runs_it() -> None:
    cfg = _config()
    rows, whole = own_flops(cfg, cfg, 30522, rows=True), own_flops(cfg, cfg, 30522, rows=False)
    assert rows["ours"] == rows["bare"] == flops_per_token(MINI, 30522, 128, 0.4, True, last_layer_on_rows=True)
    assert rows["equal"] == flops_per_token(MINI, 30522, 128, 0.15, True, last_layer_on_rows=True)
    assert whole["ours"] == flops_per_token(MINI, 30522, 128, 0.4, True)
    assert rows["hf"] == whole["hf"] == flops_per_token(MINI, 30522, 128, 0.15, sparse_head=False)
    assert rows["ours"] / 1e6 == pytest.approx(36.76, abs=0.01) and rows["hf"] / 1e6 == pytest.approx(67.72, abs=0.01)
    # a rate schedule counts its mean rate; the HF side counts its own config (no --set), here a padded vocabulary
    scheduled = own_flops(_config(0.4, "linear", 0.2), cfg, 30522, rows=True)["ours"]
    assert scheduled == pytest.approx(flops_per_token(MINI, 30522, 128, 0.3, True, last_layer_on_rows=True))
    padded = SimpleNamespace(model=replace(MINI, pad_vocab_multiple=64), masking=cfg.masking, data=cfg.data)
    assert own_flops(padded, cfg, 30522, rows=True)["hf"] == rows["hf"]


def test_the_rows_path_is_the_step_modules_own_on_packed_blocks_on_the_cpu(tiny_config) -> None:
    """As `pretrain` builds it: BERT's layers take the path, ModernBERT's do not; padded blocks, CUDA's static
    shapes and model.sparse_last_layer false run the whole last layer."""
    cpu, gpu = SimpleNamespace(device="cpu"), SimpleNamespace(device="cuda")

    def rows(setup: SimpleNamespace, **extra: object) -> bool:
        cfg = tiny_config(**{"data.document_attention": "packed", **extra})
        return _rows_path(setup, cfg, VocabInfo.from_tokenizer(load_tokenizer(cfg.tokenizer_dir)))

    assert rows(cpu) is True
    assert rows(cpu, **{"data.document_attention": "within"}) is True  # transformers 5's layers take the documents
    assert rows(gpu) is False
    assert rows(cpu, **{"data.packing": False}) is False
    assert rows(cpu, **{"model.sparse_last_layer": False}) is False
    assert rows(cpu, **{"model.architecture": "modernbert"}) is False


def test_work_and_efficiency_split_each_ratio_into_less_work_and_more_flops_per_second() -> None:
    rounds = {name: {"median": rate} for name, rate in (("ours", 3000.0), ("equal", 5000.0), ("hf", 1500.0))}
    flops = {"ours": 4e7, "equal": 2.4e7, "hf": 6.8e7, "bare": 4e7}
    limit = {"gflops": {"fp32": 100.0, "bf16": 400.0}}
    # bf16 ours against the bf16 limit, the fp32 HF recipe against the fp32 one
    setup = SimpleNamespace(device="cpu", precision="bf16", hf_precision="fp32", args=SimpleNamespace(peak_tflops=1.0))
    work = work_and_efficiency(setup, flops, rounds, limit)
    assert work["share"] == {"ours": 4e7 * 3000 / 400e9, "equal": 2.4e7 * 5000 / 400e9, "hf": 6.8e7 * 1500 / 100e9}
    for name in ("ours", "equal"):  # less work x more FLOP/s = the tokens/s ratio
        product = work[f"{name}_less_work"] * work[f"{name}_more_flops_per_s"]
        assert product == pytest.approx(rounds[name]["median"] / rounds["hf"]["median"])
    assert work["ours_less_work"] == pytest.approx(6.8 / 4)
    # on a GPU: against --peak-tflops
    gpu = SimpleNamespace(device="cuda", precision="bf16", hf_precision="bf16", args=SimpleNamespace(peak_tflops=2.0))
    assert work_and_efficiency(gpu, flops, rounds, None)["share"]["hf"] == pytest.approx(6.8e7 * 1500 / 2e12)
