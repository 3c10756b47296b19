"""The benchmark's adapt section: continued pretraining from a base, mlmtrain against the HF recipe at equal time,
on a tiny base written by plain transformers and a tiny domain corpus (quick mode)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bench.args import check_args, parse_args
from bench.setup import BenchmarkError

from ..helpers import write_corpus
from ..train.test_init_from import _domain_corpus, write_base
from .test_benchmark_script import SCRIPT, _report, _run, _tiny_task


def _inputs(tmp_path: Path) -> dict[str, Path]:
    domain = tmp_path / "domain"
    domain.mkdir()
    train = _domain_corpus(domain)
    (domain / "valid.txt").write_text("\n".join(train.read_text().splitlines()[:20]) + "\n")
    general = write_corpus(tmp_path / "general.txt", 60, seed=5)
    return {
        "base": write_base(tmp_path / "tiny-bert"),
        "train": train,
        "task": _tiny_task(tmp_path / "task"),
        "general": general,
    }


def _adapt_args(inputs: dict[str, Path], *extra: str) -> list[str]:
    given = {"--adapt-base": inputs["base"], "--adapt-train": inputs["train"], "--adapt-task": inputs["task"]}
    return ["--quick", "--sections", "adapt", *(str(x) for item in given.items() for x in item),
            "--task", str(inputs["task"]), *extra]  # fmt: skip


def test_the_adapt_section_refuses_missing_inputs_before_any_training(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    assert check_args(parse_args(_adapt_args(inputs))) == {"adapt"}
    for flag, value, words in (
        ("--adapt-base", None, "--adapt-base MODEL"),
        ("--adapt-train", tmp_path / "nowhere.txt", "--adapt-train FILE"),
        ("--adapt-task", tmp_path / "nowhere", "--adapt-task FOLDER"),
        ("--adapt-base", inputs["task"], "model.init_from"),  # a folder that holds no masked LM
    ):
        args = _adapt_args(inputs)
        at = args.index(flag)
        args[at : at + 2] = [] if value is None else [flag, str(value)]
        with pytest.raises((BenchmarkError, Exception), match=words.replace(".", r"\.")):
            check_args(parse_args(args))
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    (lonely / "train.txt").write_text("some text\n")
    args = _adapt_args(inputs)
    args[args.index("--adapt-train") + 1] = str(lonely / "train.txt")
    with pytest.raises(BenchmarkError, match="valid.txt"):
        check_args(parse_args(args))


@pytest.mark.slow
def test_quick_adapt_races_ours_and_the_hf_recipe_from_one_base(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    out = tmp_path / "results"
    common = ["--train", str(inputs["general"]), "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    args = _adapt_args(inputs, "--adapt-extend", "2")
    del args[args.index("--task") : args.index("--task") + 2]  # the domain's task alone: no general one
    _run([sys.executable, str(SCRIPT), *args, *common])
    adapt = _report(out)["adapt"]
    rows = adapt["rows"]
    assert set(rows) == {"base", "ours", "hf", "extend"}
    assert (
        f"model.init_from={inputs['base']}" in rows["ours"]["command"]
        and "train.max_time=5.0" in rows["ours"]["command"]
    )
    assert "tokenizer.extend_vocab=2" in rows["extend"]["command"]
    words = (tmp_path / "work" / "runs" / "adapt-extend" / "added_words.txt").read_text().splitlines()[1:]
    assert sorted(words) == ["rabbit", "wonderland"]  # the domain's words the base splits into letters
    for name, row in rows.items():
        assert row["domain_ppl"] > 1 and row["general_ppl"] > 1
        assert "general" not in row  # no general task given: not fine-tuned on one
        for task in ("domain",):
            assert len(row[task]["values"]) == 2
            if name != "base":  # paired, seed by seed, with the base's fine-tuning runs
                paired = [x - y for x, y in zip(row[task]["values"], rows["base"][task]["values"], strict=True)]
                assert row[task]["minus_base"]["values"] == pytest.approx(paired)
    assert rows["ours"]["steps"] > 0 and rows["hf"]["steps"] > 0
    assert rows["ours"]["domain_ppl"] != rows["base"]["domain_ppl"]  # the continued model is not the base
    assert adapt["tokens_per_s_ratio"] == pytest.approx(rows["ours"]["tokens_per_s"] / rows["hf"]["tokens_per_s"])
    text = next(out.glob("benchmark-*.md")).read_text()
    assert "## Continued pretraining at equal time" in text and "| the base encoder (not adapted) |" in text
    assert "- settings: the base's shape and vocabulary, seq_len 32," in text  # no --size, no timed steps
    assert "rounds" not in text.split("- settings:")[1].splitlines()[0]


def test_without_tasks_the_adapt_section_measures_speed_and_perplexity_only(tmp_path: Path) -> None:
    from bench.report import _adapt_lines
    from bench.verdicts import verdicts

    inputs = _inputs(tmp_path)
    args = _adapt_args(inputs)
    for flag in ("--adapt-task", "--task"):
        at = args.index(flag)
        del args[at : at + 2]
    assert check_args(parse_args(args)) == {"adapt"}  # no task, no fine-tuning: accepted
    row = {"domain_ppl": 30.0, "general_ppl": 40.0, "steps": 10, "tokens_per_s": 2000.0}
    adapt = {"budget_s": 60.0, "base": "a-base", "seeds": 3, "valid": str(inputs["train"]), "tasks": {}, "warm": None,
             "extend_vocab": 0, "tokens_per_s_ratio": 2.0, "rows": {"base": {"domain_ppl": 50.0, "general_ppl": 45.0},
             "ours": row, "hf": {**row, "tokens_per_s": 1000.0}}}  # fmt: skip
    text = "\n".join(_adapt_lines(adapt))
    assert "tokens/s: ours / HF recipe = 2.00" in text and "Fine-tuning" not in text and "accuracy" not in text
    figures = {verdict.figure for verdict in verdicts({"adapt": adapt}, "cpu")}
    assert figures == {"adapt: ours / HF recipe, domain ppl", "adapt: tokens/s ours / HF recipe"}
