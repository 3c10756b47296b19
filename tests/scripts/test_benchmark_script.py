"""scripts/benchmark.py (its modules in scripts/bench/): its timing and time-to-target arithmetic, and a smoke run
of the script itself (and of scripts/benchmark_gpu.sh) on the built-in corpus. The figures of a smoke run mean
nothing; their shape does."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from bench.args import check_args, parse_args
from bench.contestants import training_clock
from bench.report import command_line, markdown
from bench.setup import BenchmarkError
from bench.stats import mean_interval, steady_tokens_per_s, time_to_target
from bench.verdicts import Verdict

from mlmtrain.errors import UserError
from mlmtrain.train.precision import cpu_bf16_support, resolve_precision

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "benchmark.py"
HAS_AVX512_BF16_ONLY = cpu_bf16_support() == "avx512"  # no AMX: the precision section tries bf16-head


def test_steady_rate_counts_from_the_end_of_warm_up() -> None:
    # steps of 100 tokens; the first (warm-up) step is slow, then one step per 0.5 s
    points = [(100, 5.0), (200, 5.5), (300, 6.0), (400, 6.5)]
    assert steady_tokens_per_s(points, warmup_steps=1) == pytest.approx(300 / 1.5)
    with pytest.raises(BenchmarkError):
        steady_tokens_per_s(points, warmup_steps=4)


def test_time_to_target_interpolates_between_evaluations() -> None:
    evals = [{"train_seconds": 10.0, "eval_ppl": 100.0}, {"train_seconds": 20.0, "eval_ppl": 50.0}]
    assert time_to_target(evals, 75.0) == pytest.approx(15.0)
    assert time_to_target(evals, 200.0) == 10.0  # reached at the first evaluation: its time
    assert time_to_target(evals, 10.0) is None


def test_our_evaluations_leave_evaluation_time_out_of_the_clock() -> None:
    train = [{"step": s, "elapsed_s": float(s)} for s in range(1, 5)]
    evals = [
        {"step": 2, "eval_loss": 5.0, "eval_ppl": 148.4, "eval_seconds": 0.5},
        {"step": 4, "eval_loss": 4.0, "eval_ppl": 54.6, "eval_seconds": 0.5},
    ]
    clock = training_clock(train, evals)
    assert [point["train_seconds"] for point in clock] == [2.0, 3.5]


def test_a_variant_with_a_weight_average_reports_the_averages_perplexity_too() -> None:
    from bench.report import _variants_lines

    train = [{"step": s, "elapsed_s": float(s)} for s in (1, 2)]
    evals = [{"step": 2, "eval_loss": 4.0, "eval_ppl": 54.6, "ema_eval_loss": 3.9, "ema_eval_ppl": 49.4}]
    assert training_clock(train, evals)[0]["ema_eval_ppl"] == 49.4  # kept beside the live weights' figures
    row = {"changes": {}, "steps": 2, "train_seconds": 2.0, "flops": 1e12, "eval_ppl": 54.6}
    rows = {"fast": row, "ema": {**row, "changes": {"train.ema": "0.9"}, "ema_eval_ppl": 49.4}}
    lines = _variants_lines({"rows": rows, "fast_recipe": {}, "budget_s": 2, "task": None, "seeds": 3})
    assert "| ema | train.ema=0.9 | 2 | 2 | 1e+12 | 54.60 (average 49.40) |" in lines
    assert "| fast | – | 2 | 2 | 1e+12 | 54.60 |" in lines


def test_a_reference_is_scored_on_the_sections_tokenizer_and_refused_with_another(tmp_path: Path) -> None:
    """A distillation teacher as the ceiling: a model trained elsewhere, evaluated as the runs are; one with another
    tokenizer than the section's is refused before anything trains (the fine-tuning reads one tokenizer's ids)."""
    from bench.setup import FAST_RECIPE, prepare
    from bench.variants import parse_reference, score_reference
    from transformers import BertConfig, BertForMaskedLM

    from mlmtrain.config import TokenizerConfig
    from mlmtrain.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer

    args = parse_args(["--quick", "--sections", "variants", "--variant", "a:optim.lr=1e-3", "--train",
                       "builtin:python-docs", "--work-dir", str(tmp_path / "work")])  # fmt: skip
    setup = prepare(args)
    tokenizer = load_tokenizer(setup.data_dir / "tokenizer")
    size = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), **size))
    model.save_pretrained(tmp_path / "teacher")
    tokenizer.save_pretrained(tmp_path / "teacher")
    name, folder = parse_reference(f"teacher:{tmp_path / 'teacher'}")
    row = score_reference(setup, name, folder, FAST_RECIPE)
    assert row["reference"] == str(tmp_path / "teacher")
    assert len(tokenizer) / 4 < row["eval_ppl"] < 4 * len(tokenizer)  # an untrained model: about the vocabulary's size
    lines = _variants_lines_for({"teacher": row})
    assert (
        f"| teacher | reference: {tmp_path / 'teacher'} (not trained here) | – | – | – | {row['eval_ppl']:.2f} |"
        in lines
    )

    settings = TokenizerConfig(vocab_size=120)
    save_tokenizer(
        train_tokenizer(["some other text, with other words in it"] * 50, settings), tmp_path / "other", settings
    )
    model.save_pretrained(tmp_path / "other")
    with pytest.raises(BenchmarkError, match="another tokenizer than .*tokenizer.path"):
        score_reference(setup, "other", tmp_path / "other", FAST_RECIPE)


def test_a_reference_needs_a_model_folder_a_name_of_its_own_and_the_variants_section(tmp_path: Path) -> None:
    from bench.variants import parse_reference

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert parse_reference(f"teacher:{tmp_path / 'model'}") == ("teacher", tmp_path / "model")
    given = ["--quick", "--sections", "variants", "--variant", "a:optim.lr=1e-3"]
    for reference, words in (
        (f"{tmp_path / 'model'}", "NAME:FOLDER"),
        (f"fast:{tmp_path / 'model'}", "other than 'fast'"),
        (f"teacher:{tmp_path}", "holds no model"),
        (f"a:{tmp_path / 'model'}", "names must differ"),
    ):
        with pytest.raises(BenchmarkError, match=words):
            check_args(parse_args([*given, "--reference", reference]))
    with pytest.raises(BenchmarkError, match="add variants to --sections"):
        check_args(parse_args(["--quick", "--sections", "recipes", "--reference", f"t:{tmp_path / 'model'}"]))


def _variants_lines_for(rows: dict) -> list[str]:
    from bench.report import _variants_lines

    fast = {"changes": {}, "steps": 2, "train_seconds": 2.0, "flops": 1e12, "eval_ppl": 54.6}
    return _variants_lines({"rows": {"fast": fast, **rows}, "fast_recipe": {}, "budget_s": 2, "task": None, "seeds": 3})


def test_the_report_states_when_what_and_where_it_measured() -> None:
    """The Markdown stands alone as a measurement file: date, commit, exact command, machine and software."""
    versions = {"torch": "2.13.0", "transformers": "5.24.0", "tokenizers": "0.23.3", "datasets": None}
    machine = {"cpu": "Some CPU", "cpu_count": 2, "memory_gib": 24.0, "torch_threads": 2, "platform": "Linux-6"}
    settings = {"size": "tiny", "seq_len": 32, "batch": 8, "precision": "auto (fp32)", "device": "cpu", "steps": 8}
    settings |= {"warmup_steps": 3, "rounds": 1, "vocab_size": 2000, "train_text": "train.txt", "set": []}
    results = {
        "created": "2026-12-02T06:00:00+0000",
        "source": {"commit": "a" * 40, "uncommitted_changes": True},
        "command": "python scripts/benchmark.py --quick",
        "machine": machine | {"python": "3.11.7", "versions": versions},
        "settings": settings,
        "verdicts": [Verdict("ours / bare-step limit", 0.97, ">=", 0.95)],
    }
    text = markdown(results)
    assert "- date: 2026-12-02T06:00:00+0000" in text
    assert f"- commit: `{'a' * 40}`, with uncommitted changes" in text
    assert "- command (from the repository root): `python scripts/benchmark.py --quick`" in text
    assert "- machine: Some CPU (2 cores, 24 GiB, 2 torch threads); Linux-6" in text
    assert "- software: Python 3.11.7, torch 2.13.0, transformers 5.24.0, tokenizers 0.23.3\n" in text
    assert "| ours / bare-step limit | 0.970 | >= 0.95 | PASS |" in text
    results["source"] = {"commit": None, "uncommitted_changes": None}
    assert "- commit: unknown (not a git checkout)\n" in markdown(results)


def test_the_command_line_is_the_one_to_type_in_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    line = command_line([str(SCRIPT), "--quick", "--set", "train.compile=true", "--train", "my text.txt"])
    assert (
        line == "OMP_NUM_THREADS=1 python scripts/benchmark.py --quick --set train.compile=true --train 'my text.txt'"
    )


def test_an_existing_report_file_is_refused_before_the_run(tmp_path: Path) -> None:
    kept = tmp_path / "kept.md"
    kept.write_text("a measurement\n")
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "nowhere.md")
    for path in (kept, dangling):
        with pytest.raises(BenchmarkError, match="exists; give a new file name"):
            check_args(parse_args(["--quick", "--sections", "limit", "--report-md", str(path)]))
    assert kept.read_text() == "a measurement\n"
    assert check_args(parse_args(["--quick", "--sections", "limit", "--report-md", str(tmp_path / "new.md")]))


def test_a_missing_hf_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    with pytest.raises(BenchmarkError, match="needs datasets"):
        check_args(parse_args(["--quick", "--sections", "throughput"]))
    assert check_args(parse_args(["--quick", "--sections", "limit"])) == {"limit"}


def _run(command: list[str]) -> subprocess.CompletedProcess:
    # PYTHON: benchmark_gpu.sh runs the interpreter running the tests, not whichever python3 is on PATH
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "src"), PYTHON=sys.executable)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _report(out: Path) -> dict:
    (json_path,) = out.glob("benchmark-*.json")
    assert json_path.with_suffix(".md").is_file()
    return json.loads(json_path.read_text())


@pytest.mark.slow
def test_quick_throughput_and_limit(tmp_path: Path) -> None:
    out = tmp_path / "results"
    common = ["--quick", "--train", "builtin:python-docs", "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    rate = ["--set", "masking.mlm_probability=0.3"]  # ours' --set: the contestant at the HF recipe's rate overrides it
    _run([sys.executable, str(SCRIPT), *common, "--sections", "throughput,limit", "--rounds", "1", *rate])
    report = _report(out)
    rounds = report["rounds"]
    for name in ("ours", "equal", "hf", "bare"):  # ours masks 30 %: ours at the HF recipe's 15 % runs too
        assert len(rounds[name]["values"]) == 1
        assert rounds[name]["median"] > 0
        assert rounds[name]["peak_rss_mb"] > 0
        assert rounds["work"]["share"][name] > 0
    assert all(rounds["mfu"][name] > 0 for name in ("ours", "equal", "hf", "bare"))
    assert rounds["ratio"] > 0 and rounds["ours_over_limit"] > 0
    assert rounds["equal_ratio"] == rounds["equal"]["median"] / rounds["hf"]["median"]
    assert (rounds["ours_masking"], rounds["hf_masking"]) == (0.3, 0.15)
    work = rounds["work"]["flops_per_token"]
    assert work["equal"] < work["ours"] < work["hf"]  # the sparse head's rows: 15 %, 40 %, every position
    assert rounds["work"]["ours_less_work"] == pytest.approx(work["hf"] / work["ours"])
    command = (tmp_path / "work" / "runs" / "throughput-equal-r1" / "benchmark.log").read_text().splitlines()[0]
    rates = [arg for arg in command.split() if arg.startswith("masking.mlm_probability=")]
    assert rates == ["masking.mlm_probability=0.3", "masking.mlm_probability=0.15"]  # the last one wins
    assert rounds["mfu"]["flops_per_token"] > 0
    assert rounds["mfu"]["cpu_limit"]["gflops"]["fp32"] > 0  # measured here, not a GPU's peak
    (report_md,) = out.glob("benchmark-*.md")
    text = report_md.read_text()
    assert "CPU limit: " in text and "ours / HF recipe " in text and "at the HF recipe's 15 % masked" in text
    assert "Where the ratio comes from, ours against the HF recipe: as ours trains, " in text
    assert "mlmtrain pretrain" in rounds["ours"]["command"]
    assert report["settings"]["size"] == "tiny" and report["settings"]["device"] == "cpu"
    figures = [v["figure"] for v in report["verdicts"]]
    assert figures == ["throughput at the HF recipe's masking rate: ours / HF recipe", "ours / bare-step limit"]


@pytest.mark.slow
def test_gpu_script_runs_on_cpu_with_quick(tmp_path: Path) -> None:
    out = tmp_path / "results"
    work = ["--work-dir", str(tmp_path / "work"), "--out", str(out), "--train", "builtin:python-docs"]
    # the limit section alone keeps this short: ours and the bare step, one round
    report_md = tmp_path / "docs" / "limit.md"  # a measurement file where the user asks, its folder made
    limit = ["--sections", "limit", "--rounds", "1", "--report-md", str(report_md)]
    _run(["bash", str(REPO / "scripts" / "benchmark_gpu.sh"), "--quick", *work, *limit])
    report = _report(out)
    rounds = report["rounds"]
    assert rounds["ours_over_limit"] > 0 and "hf" not in rounds
    (results_md,) = out.glob("benchmark-*.md")
    assert report_md.read_text() == results_md.read_text()
    assert report["command"].startswith("OMP_NUM_THREADS=1 ")  # the thread setting it ran with, then the command
    assert " python scripts/benchmark.py --sections throughput,limit --quick " in report["command"]
    assert report["command"].endswith(shlex.join(limit))  # the exact command, the script's defaults included
    commit = report["source"]["commit"]
    assert commit is None or len(commit) == 40
    assert f"- commit: `{commit}`" in report_md.read_text() if commit else "- commit: unknown" in report_md.read_text()


def test_profile_script_runs_on_cpu_with_quick(tmp_path: Path) -> None:
    out = tmp_path / "profile"
    script = REPO / "scripts" / "profile_step.py"
    work = ["--work-dir", str(tmp_path / "work"), "--out", str(out)]
    done = _run([sys.executable, str(script), "--quick", "--parts", *work])
    assert "tokens/s" in done.stdout and "Optimizer.step" in done.stdout  # the step line and the operator table
    assert json.loads((out / "trace.json").read_text())["traceEvents"]
    # --parts: the step's CPU time by part, the optimizer's and the head's among them
    rows = {line.split(" | ")[0][2:]: line for line in done.stdout.splitlines() if line.startswith("| ")}
    assert {"data wait", "attention", "GELU", "LayerNorm", "head", "optimizer", "CPU time"} <= rows.keys()


def _event(name: str, parent: object = None, shapes: tuple = ()) -> SimpleNamespace:
    return SimpleNamespace(name=name, cpu_parent=parent, input_shapes=list(shapes))


def test_profile_parts_name_each_operator_by_its_range_its_name_or_its_shapes() -> None:
    from profile_step import part_of

    vocab = 30522
    loader = _event("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    fused = _event("_DecoderCrossEntropy")
    step = _event("Optimizer.step#AdamW.step")
    gelu_backward = _event("autograd::engine::evaluate_function: GeluBackward0")
    decoder_backward = _event("autograd::engine::evaluate_function: AddmmBackward0")
    cases = {
        "data wait": _event("aten::copy_", _event("aten::stack", loader)),
        "head": _event("aten::mm", fused, [[1638, 256], [256, vocab]]),
        "optimizer": _event("aten::_fused_adamw_", step),
        "GELU": _event("aten::mul", gelu_backward),
        "LayerNorm": _event("aten::native_layer_norm"),
        "attention": _event("aten::_scaled_dot_product_flash_attention_for_cpu"),
        "linear layers": _event("aten::mm", decoder_backward, [[4096, 256], [256, 1024]]),
        "clip": _event("aten::_foreach_norm"),
        "other": _event("aten::fill_"),
    }
    assert {part: part_of(event, vocab) for part, event in cases.items()} == {part: part for part in cases}
    assert part_of(_event("aten::mm", decoder_backward, [[4096, vocab], [vocab, 256]]), vocab) == "head"


def _profile_variants(tmp_path: Path, *variants: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """profile_step.py --quick with each of `variants` as a --variant: its run and the rows of variants.json."""
    out = tmp_path / "profile"
    script = REPO / "scripts" / "profile_step.py"
    work = ["--work-dir", str(tmp_path / "work"), "--out", str(out)]
    flags = [flag for variant in variants for flag in ("--variant", variant)]
    done = _run([sys.executable, str(script), "--quick", *work, *flags, "--top", "2"])
    return done, json.loads((out / "variants.json").read_text())


def test_profile_script_compares_variants_in_one_process(tmp_path: Path) -> None:
    done, rows = _profile_variants(tmp_path, "", "model.dropout=0,train.batch_size=4")
    assert [row["settings"] for row in rows] == ["no --set", "model.dropout=0, train.batch_size=4"]
    # batch 8 then 4 sequences of 32 tokens: each row's tokens/s is its own batch over its own step time
    assert [round(row["tokens_per_s"] * row["step_ms"] / 1e3) for row in rows] == [8 * 32, 4 * 32]
    assert "| model.dropout=0, train.batch_size=4 |" in done.stdout


def test_profile_script_pins_the_attention_kernel_and_reports_it(tmp_path: Path) -> None:
    """sdpa=BACKEND runs the variant's steps with that attention kernel, and each row names the kernel that ran."""
    done, (math, flash) = _profile_variants(tmp_path, "sdpa=math", "sdpa=flash")
    assert (math["settings"], flash["settings"]) == ("sdpa=math", "sdpa=flash")
    assert any("math" in op for op in math["attention_ops"]), math["attention_ops"]
    assert not any("flash" in op for op in math["attention_ops"]), math["attention_ops"]
    assert any("flash" in op for op in flash["attention_ops"]), flash["attention_ops"]
    assert "| sdpa=math |" in done.stdout and done.stdout.rstrip().endswith("| flash |")


@pytest.mark.slow
def test_quick_tuned_precision_and_recipes(tmp_path: Path) -> None:
    """The issue-14 sections in one quick run: the race against the HF recipe given our schedule, bf16 against
    fp32, and the recipes at equal wall time, each final model probed on the labeled task where there is one."""
    out = tmp_path / "results"
    common = ["--quick", "--train", "builtin:python-docs", "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    task_here = Path(bench_task()).is_dir()
    task = ["--task", bench_task()] if task_here else []
    sections = ["--sections", "tuned,precision,recipes,variants", "--quality-budget", "4"]
    sections += ["--variant", "mb:model.architecture=modernbert,model.intermediate_size=96"]
    sections += ["--variant", "flops:model.num_layers=1,train.max_flops=fast"]  # fewer layers, the fast run's FLOPs
    _run([sys.executable, str(SCRIPT), *common, *task, *sections])
    report = _report(out)
    tuned = report["tuned"]
    assert tuned["ours"]["evals"] and tuned["hf"]["evals"]
    assert tuned["target_ppl"] == min(point["eval_ppl"] for point in tuned["hf"]["evals"])
    assert tuned["hf"]["seconds_to_target"] is not None
    precision = report["precision"]
    assert precision["other"] in ("bf16", "bf16-head")  # bf16-head on a CPU with AVX512-BF16 and no AMX
    assert precision["auto"] == resolve_precision("auto", torch.device("cpu")).name  # whose choice it checks
    assert (precision["other"] == "bf16-head") == (precision["auto"] == "bf16-head" or HAS_AVX512_BF16_ONLY)
    assert set(precision["tokens_per_s"]) == {"fp32", precision["other"]} and precision["speedup"] > 0
    assert precision["same_step"]["step"] == precision["steps"]  # the last step, evaluated on both
    assert precision["same_step"]["bf16_ppl"] != precision["same_step"]["fp32_ppl"]  # two real runs
    recipes = report["recipes"]
    assert set(recipes["rows"]) == {"classic", "fast", "hf"}
    assert all(row["eval_ppl"] > 1 and row["steps"] > 0 for row in recipes["rows"].values())
    assert recipes["fast_recipe"]["model.dropout"] == 0.0
    assert (tmp_path / "work" / "runs" / "recipes-hf" / "checkpoints" / "final" / "config.json").is_file()
    for row in recipes["rows"].values():
        assert (row["probe"] is not None) == task_here
        assert row["probe"] is None or 0.0 <= row["probe"]["mean"] <= 1.0
    variants = report["variants"]  # the fast recipe and a ModernBERT of it, on one tokenizer, paired seed by seed
    assert variants["rows"]["mb"]["changes"] == {"model.architecture": "modernbert", "model.intermediate_size": "96"}
    assert "model.architecture=modernbert" in variants["rows"]["mb"]["command"]
    assert variants["rows"]["fast"]["eval_ppl"] != variants["rows"]["mb"]["eval_ppl"]
    fast_run, same_flops = variants["rows"]["fast"], variants["rows"]["flops"]  # ends at the fast run's FLOPs
    assert same_flops["changes"]["train.max_flops"] == fast_run["flops"] and same_flops["steps"] > fast_run["steps"]
    assert fast_run["flops"] <= same_flops["flops"] < fast_run["flops"] + same_flops["flops"] / same_flops["steps"]
    if task_here:
        mb, fast = variants["rows"]["mb"]["probe"], variants["rows"]["fast"]["probe"]
        paired = [x - y for x, y in zip(mb["values"], fast["values"], strict=True)]
        assert mb["minus_fast"]["values"] == pytest.approx(paired) and "minus_fast" not in fast
    figures = [v["figure"] for v in report["verdicts"]]
    assert figures == [
        "time to the tuned HF recipe's ppl: ours / HF",
        "bf16 vs fp32 ppl at the same step: |ratio - 1|",
        f"{precision['other']} / fp32 tokens/s (auto picks {precision['auto']})",
    ]
    speed = report["verdicts"][-1]  # fp32 chosen: right when the other was slower; bf16 chosen: when it was faster
    assert speed["comparison"] == ("<=" if precision["auto"] == "fp32" else ">=")
    markdown = (out / next(out.glob("benchmark-*.md")).name).read_text()
    assert "Recipes at equal wall time" in markdown and f"{precision['other']} against fp32" in markdown
    assert (
        "## Variants of the fast recipe at equal wall time" in markdown
        and "| mb | model.architecture=modernbert" in markdown
    )
    assert "rounds" not in markdown.split("- settings:")[1].splitlines()[0]  # no timed rounds ran
    assert markdown.count("## Targets") == 1


def test_a_variant_given_the_fast_runs_compute_trains_for_it_with_no_time_budget() -> None:
    from bench.variants import with_fast_budget

    fast_run = {"flops": 4.5e12, "tokens": 81920, "steps": 20}
    recipe = {"model.dropout": 0.0, "train.objective": "distill", "train.max_flops": "fast"}
    assert with_fast_budget(recipe, fast_run) == recipe | {"train.max_flops": 4.5e12, "train.max_time": None}
    assert with_fast_budget({"train.max_steps": "fast"}, fast_run) == {"train.max_steps": 20, "train.max_time": None}
    assert with_fast_budget({"masking.schedule": "linear"}, fast_run) == {"masking.schedule": "linear"}  # timed


def test_mean_interval_over_seeds_uses_students_t() -> None:
    summary = mean_interval([0.5, 0.6, 0.7])
    assert summary["mean"] == pytest.approx(0.6)
    half = 0.95 / (2 * 0.975 * 0.025) ** 0.5 * 0.1 / 3**0.5  # t(0.975, 2 df), exact at 2 df, x sd / sqrt(n)
    assert summary["ci95"] == pytest.approx([0.6 - half, 0.6 + half])
    assert summary["half_width"] == pytest.approx(half)
    assert mean_interval([0.5])["ci95"] is None


def test_the_electra_section_is_on_request_and_checks_its_task(tmp_path: Path) -> None:
    assert "electra" not in parse_args(["--quick"]).sections.split(",")
    with pytest.raises(BenchmarkError, match="electra needs a labeled task folder: pass --task"):
        check_args(parse_args(["--quick", "--sections", "electra"]))
    with pytest.raises(BenchmarkError, match="is not a folder"):  # any section: a mistyped task is refused
        check_args(parse_args(["--quick", "--sections", "recipes", "--task", str(tmp_path / "no")]))


def test_a_variant_is_named_and_changes_the_fast_recipe(tmp_path: Path) -> None:
    given = ["--quick", "--sections", "variants"]
    assert check_args(parse_args([*given, "--variant", "mb:model.architecture=modernbert"])) == {"variants"}
    for variants, words in (
        ([], "at least one --variant"),
        (["model.architecture=modernbert"], "NAME:KEY=VALUE"),
        (["fast:model.dropout=0.1"], "other than 'fast'"),
        (["a:optim.lr=1e-3", "a:optim.lr=2e-3"], "must differ"),
    ):
        with pytest.raises(BenchmarkError, match=words):
            check_args(parse_args([*given, *(x for v in variants for x in ("--variant", v))]))


def _tiny_task(folder: Path) -> Path:
    """Two classes that the words tell apart, a few dozen examples a split."""
    import random

    rng = random.Random(0)
    for split, count in (("train", 80), ("valid", 24), ("test", 24)):
        rows = []
        for i in range(count):
            words = ["function", "module", "class"] if i % 2 else ["string", "format", "print"]
            text = " ".join(rng.choice(words + ["the", "a", "of"]) for _ in range(12))
            rows.append(json.dumps({"text": text, "label": "code" if i % 2 else "text"}) + "\n")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{split}.jsonl").write_text("".join(rows))
    return folder


@pytest.mark.slow
def test_quick_downstream(tmp_path: Path) -> None:
    out = tmp_path / "results"
    task = _tiny_task(tmp_path / "task")
    common = ["--quick", "--train", "builtin:python-docs", "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    _run([sys.executable, str(SCRIPT), *common, "--sections", "downstream,electra", "--task", str(task)])
    report = _report(out)
    downstream = report["downstream"]
    # after the downstream section, the electra section adds ELECTRA only: MLM and untrained are the same runs
    electra = report["electra"]["rows"]
    assert electra["ours"]["values"] == downstream["ours"]["score"]["values"]
    assert electra["untrained"]["values"] == downstream["untrained"]["score"]["values"]
    assert len(electra["electra"]["values"]) == 2 and electra["electra"]["steps"] > 0
    assert not (tmp_path / "work" / "runs" / "objective-mlm").exists()  # reused, not pretrained again
    for name in ("ours", "hf", "untrained"):
        score = downstream[name]["score"]
        assert len(score["values"]) == 2 and 0 <= score["mean"] <= 1 and score["half_width"] >= 0
    assert downstream["ours"]["pretrain_steps"] > 0 and downstream["hf"]["pretrain_steps"] > 0
    assert "mlmtrain probe" in downstream["probe_command"]
    assert electra["electra"]["tokens_per_s"] > 0 and "train.objective=electra" in electra["electra"]["command"]
    assert "mlmtrain probe" in report["electra"]["probe_command"]
    # ELECTRA replaces the paper's 15 % of the tokens; MLM keeps the shipped recipe's rate
    assert report["electra"]["electra_recipe"] == {"masking.mlm_probability": 0.15}
    assert "masking.mlm_probability=0.15" in electra["electra"]["command"]
    assert [v["figure"] for v in report["verdicts"]] == [
        "electra - mlm test accuracy, equal time",
        "downstream: ours - untrained, beyond both intervals",
        "downstream: ours / HF recipe at equal time",
    ]
    assert "## Downstream" in (out / Path(next(out.glob("*.md"))).name).read_text()


def test_downstream_runs_only_when_asked_with_its_own_size_and_vocabulary() -> None:
    assert "downstream" not in parse_args([]).sections
    alone = parse_args(["--sections", "downstream"])
    assert (alone.size, alone.vocab_size, alone.downstream_budget, alone.seeds) == ("tiny", 8000, 900, 3)
    assert (alone.probe_train_examples, alone.probe_max_length) == (0, 64)  # all examples, a summary's opening
    assert parse_args(["--sections", "downstream,electra"]).vocab_size == 8000
    shared = parse_args(["--sections", "downstream,limit"])  # the other sections' values hold
    assert (shared.size, shared.vocab_size, shared.downstream_budget) == ("mini", 30522, 600)
    assert parse_args(["--sections", "downstream", "--size", "mini"]).size == "mini"  # an explicit one wins
    assert not Verdict("beyond the intervals", 0.0, ">", 0.0).passed  # a tie is not a win


def bench_task() -> str:
    """The labeled task the tests give the benchmark (in ../shared beside the checkout, where CI keeps it)."""
    return str(REPO.parent / "shared" / "tasks" / "wikipedia-vital-topics")


def _pair_task(tmp_path: Path) -> Path:
    """A sentence-pair task built by scripts/make_pair_task.py from a few dozen synthetic articles."""
    import random

    rng = random.Random(0)
    corpus = tmp_path / "pair-corpus"
    corpus.mkdir()
    words = "the a river city music war king science art number law ship".split()
    for split, count in (("train", 64), ("valid", 24), ("test", 24)):
        articles = [
            " ".join(" ".join(rng.choice(words) for _ in range(8)).capitalize() + "." for _ in range(4))
            for _ in range(count)
        ]
        (corpus / f"{split}.txt").write_text("\n".join(articles) + "\n")
    out = tmp_path / "pair-task"
    command = [sys.executable, str(REPO / "scripts" / "make_pair_task.py"), "--corpus", str(corpus), "--out", str(out)]
    _run([*command, "--min-words", "20"])
    return out


def test_the_objectives_section_is_on_request_with_its_pair_task_and_flop_budget(tmp_path: Path) -> None:
    assert "objectives" not in parse_args([]).sections.split(",")
    alone = parse_args(["--sections", "objectives"])  # the downstream sections' size and vocabulary
    assert (alone.size, alone.vocab_size, alone.flops_budget) == ("tiny", 8000, 3e13)
    assert parse_args(["--quick", "--sections", "objectives"]).flops_budget == 1e10
    task = ["--task", str(_tiny_task(tmp_path / "task"))]
    with pytest.raises(BenchmarkError, match="objectives needs a sentence-pair task folder: pass --pair-task"):
        check_args(parse_args(["--quick", "--sections", "objectives", *task]))
    with pytest.raises(BenchmarkError, match="is not a folder"):
        check_args(parse_args(["--quick", "--sections", "objectives", *task, "--pair-task", str(tmp_path / "no")]))
    with pytest.raises(UserError, match="pair"):  # a task without the pair field: refused before any pretraining
        check_args(parse_args(["--quick", "--sections", "objectives", *task, "--pair-task", task[1]]))
    pair_folder = tmp_path / "pairs"
    pair_folder.mkdir()
    for split in ("train", "valid", "test"):
        rows = [{"text": "a b", "pair": "c d", "label": label} for label in ("same", "other")]
        (pair_folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pair = ["--pair-task", str(pair_folder)]
    with pytest.raises(BenchmarkError, match="--flops-budget must be > 0"):
        check_args(parse_args(["--quick", "--sections", "objectives", *task, *pair, "--flops-budget", "0"]))
    assert check_args(parse_args(["--quick", "--sections", "objectives", *task, *pair])) == {"objectives"}


@pytest.mark.slow
def test_quick_objectives_at_equal_flops(tmp_path: Path) -> None:
    task, pair_task = _tiny_task(tmp_path / "task"), _pair_task(tmp_path)
    out = tmp_path / "results"
    common = ["--quick", "--train", "builtin:python-docs", "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    sections = ["--sections", "objectives", "--task", str(task), "--pair-task", str(pair_task)]
    _run([sys.executable, str(SCRIPT), *common, *sections])
    report = _report(out)
    objectives = report["objectives"]
    budget = objectives["flops_budget"]
    assert budget == 1e10
    for name, objective in (("mlm", "mlm"), ("nsp", "mlm+nsp"), ("sop", "mlm+sop"), ("electra", "electra")):
        run = objectives["pretrained"][name]
        # each stopped by the FLOP budget: past it by at most the last step's FLOPs
        assert budget <= run["flops"] < budget + run["flops"] / run["steps"] + 1, (name, run)
        assert f"train.objective={objective}" in run["command"] and f"train.max_flops={budget}" in run["command"]
        assert "train.max_steps=null" in run["command"] and "train.seed=0" in run["command"]
    assert "masking.mlm_probability=0.15" in objectives["pretrained"]["electra"]["command"]
    assert "masking.mlm_probability" not in objectives["pretrained"]["nsp"]["command"]
    for key, folder in (("single", task), ("pair", pair_task)):
        section = objectives[key]
        assert section["task"] == str(folder)
        assert ("--pair-field pair" in section["probe_command"]) == (key == "pair")
        assert section["segments"] == (2 if key == "pair" else 1)  # the pair task fine-tuned on both its texts
        rows = section["rows"]
        assert set(rows) == {"untrained", "mlm", "nsp", "sop", "electra"}
        for name, row in rows.items():
            assert len(row["values"]) == 2 and 0.0 <= row["mean"] <= 1.0
            if name == "mlm":
                assert "minus_mlm" not in row
                continue
            paired = [x - y for x, y in zip(row["values"], rows["mlm"]["values"], strict=True)]
            assert row["minus_mlm"]["values"] == pytest.approx(paired)
    assert [v["figure"] for v in report["verdicts"]] == [
        "objectives: MLM+NSP - MLM on the pair task, beyond its interval",
        "objectives: MLM+SOP - MLM on the pair task, beyond its interval",
    ]
    text = next(out.glob("benchmark-*.md")).read_text()
    assert "## Objectives at equal FLOPs" in text and "| mlmtrain pretrain, MLM+SOP |" in text
