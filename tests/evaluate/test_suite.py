"""`mlmtrain probe --suite`: the metrics against hand-computed values, the median and interval over seeds, the
reference table against its source, a suite of small local tasks in GLUE's column layout (a single-sentence task, a
pair task, a regression task) through the same code as `hf:glue/...`, an interrupted suite resumed, the scorecard in
the checkpoint's card and report, and the bad inputs."""

from __future__ import annotations

import json
import math
import random
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from mlmtrain import api
from mlmtrain.errors import UserError
from mlmtrain.evaluate import suite as suite_module
from mlmtrain.evaluate.glue import GLUE_TASKS, REFERENCE
from mlmtrain.evaluate.probe import classification_scores, regression_scores
from mlmtrain.evaluate.stats import t_quantile
from mlmtrain.evaluate.suite import Scorecard, SuiteTask, summarise
from mlmtrain.evaluate.tasks import TaskFields, load_task
from mlmtrain.report.page import build_page
from mlmtrain.report.rundata import load_run
from mlmtrain.train.ownership import foreign_files

from ..helpers import WORDS, assert_one_error_line, run_cli, snapshot

# The rows of "GLUE scores on the test set" as google-research/bert's README prints them (commit eedf571, the
# "Smaller BERT Models" release of 2020-03-11), copied as text: the reference table must say what they say.
SOURCE_HEADER = "|Model|Score|CoLA|SST-2|MRPC|STS-B|QQP|MNLI-m|MNLI-mm|QNLI(v2)|RTE|WNLI|AX|"
SOURCE_ROWS = """\
|BERT-Tiny|64.2|0.0|83.2|81.1/71.1|74.3/73.6|62.2/83.4|70.2|70.3|81.5|57.2|62.3|21.0|
|BERT-Mini|65.8|0.0|85.9|81.1/71.8|75.4/73.3|66.4/86.2|74.8|74.3|84.1|57.9|62.3|26.1|
|BERT-Small|71.2|27.8|89.7|83.4/76.2|78.8/77.0|68.1/87.0|77.6|77.0|86.4|61.8|62.3|28.6|
|BERT-Medium|73.5|38.0|89.6|86.6/81.6|80.4/78.4|69.6/87.9|80.0|79.1|87.7|62.2|62.3|30.5|
"""
SETTINGS = {"epochs": 1, "batch_size": 8, "max_length": 32, "lr": 1e-3}
FAST_API = {**SETTINGS, "device": "cpu"}
FAST = ("--epochs", "1", "--batch-size", "8", "--max-length", "32", "--lr", "1e-3", "--device", "cpu")


# ---------------------------------------------------------------------------------------------
# Metrics, median, reference


def test_each_metric_matches_a_hand_computed_value() -> None:
    # two classes: tp 2, fp 1, tn 2, fn 1
    scores = classification_scores(torch.tensor([1, 1, 0, 0, 1, 0]), torch.tensor([1, 0, 0, 0, 1, 1]), 0, True)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    assert scores["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert scores["mcc"] == pytest.approx((2 * 2 - 1 * 1) / math.sqrt(3 * 3 * 3 * 3))
    # three classes (Gorodkin): c 3, s 4, predicted counts (2, 0, 2), gold counts (2, 1, 1)
    three = classification_scores(torch.tensor([0, 2, 2, 0]), torch.tensor([0, 1, 2, 0]), 0)
    assert three["mcc"] == pytest.approx((3 * 4 - (4 + 0 + 2)) / math.sqrt((16 - 8) * (16 - 6)))
    assert "f1" not in three
    constant = classification_scores(torch.tensor([0, 0, 0]), torch.tensor([0, 1, 0]), 0, True)
    assert (constant["mcc"], constant["f1"]) == (0.0, 0.0)  # as GLUE reports a constant CoLA model: 0
    # Pearson: deviations (-1.5, -0.5, 0.5, 1.5) and (-3, -1, 0, 4); Spearman of (1, 2, 2, 3) and (1, 3, 2, 4)
    assert regression_scores(torch.tensor([1.0, 2, 3, 4]), torch.tensor([2.0, 4, 5, 9]))["pearson"] == pytest.approx(
        11 / math.sqrt(5 * 26)
    )
    rho = regression_scores(torch.tensor([1.0, 2, 2, 3]), torch.tensor([1.0, 3, 2, 4]))["spearman"]
    assert rho == pytest.approx(4.5 / math.sqrt(4.5 * 5))  # ranks (0, 1.5, 1.5, 3) and (0, 2, 1, 3)


def _fake_scorecard(tmp_path: Path, runs: dict[str, list[list[float]]]) -> tuple[Scorecard, list[SuiteTask]]:
    tasks = [SuiteTask(name, name, TaskFields(), ("f1", "accuracy")) for name in runs]
    record = {"tasks": {}}
    for name, seeds in runs.items():
        entries = [{"seed": i, "figures": f, "score": statistics.fmean(f)} for i, f in enumerate(seeds)]
        record["tasks"][name] = {"runs": entries}
    return Scorecard(tmp_path / "card.json", record), tasks


def test_the_score_is_the_median_over_seeds_with_a_t_interval_and_the_average_waits_for_every_task(
    tmp_path: Path,
) -> None:
    card, tasks = _fake_scorecard(tmp_path, {"a": [[0.4, 0.6], [0.9, 0.9], [0.6, 0.6]], "b": [[0.5, 0.7]]})
    summarise(card, tasks, seeds=[0, 1, 2])
    a = card.record["tasks"]["a"]
    assert a["score"] == 0.6 and a["figures"] == [0.6, 0.6]  # median of (0.5, 0.9, 0.6); of each figure
    half = t_quantile(0.975, 2) * statistics.stdev([0.5, 0.9, 0.6]) / math.sqrt(3)
    assert a["ci95"] == pytest.approx([2 / 3 - half, 2 / 3 + half])
    assert card.record["average"] is None and card.record["finished"] is False  # b has one seed of three
    card.record["tasks"]["b"]["runs"] += [{"seed": s, "figures": [0.8, 0.8], "score": 0.8} for s in (1, 2)]
    summarise(card, tasks, seeds=[0, 1, 2])
    assert card.record["average"] == pytest.approx((0.6 + 0.8) / 2) and card.record["finished"]


def test_the_reference_table_says_what_its_source_says() -> None:
    columns = SOURCE_HEADER.strip("|").split("|")
    order = {"cola": ["CoLA"], "sst2": ["SST-2"], "mrpc": ["MRPC"], "stsb": ["STS-B"], "qqp": ["QQP"]}
    order.update({"mnli": ["MNLI-m", "MNLI-mm"], "qnli": ["QNLI(v2)"], "rte": ["RTE"], "wnli": ["WNLI"]})
    assert list(order) == [task.name for task in GLUE_TASKS]
    rows = [dict(zip(columns, line.strip("|").split("|"), strict=True)) for line in SOURCE_ROWS.splitlines()]
    assert [row["Model"] for row in rows] == list(REFERENCE)
    for row in rows:
        _, figures, score = REFERENCE[row["Model"]]
        assert score == float(row["Score"])
        for task, names in order.items():
            assert figures[task] == tuple(float(v) for name in names for v in row[name].split("/")), task
        # GLUE's score: each task's figures averaged, MNLI's two as one task, AX left out (as the scorecard does)
        assert statistics.fmean(statistics.fmean(values) for values in figures.values()) == pytest.approx(
            score, abs=0.1
        )


# ---------------------------------------------------------------------------------------------
# Small local tasks in GLUE's column layout


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))


def glue_layout_tasks(root: Path) -> dict[str, Path]:
    """A single-sentence task (CoLA's columns), a pair task (MRPC's) and a regression task (STS-B's): train,
    validation and a test split whose labels are hidden (-1), as on the Hub."""
    rng = random.Random(0)
    folders = {}
    for name, pair, regression in (("single", False, False), ("pair", True, False), ("regression", True, True)):
        for split, count in (("train", 24), ("validation", 12), ("test", 6)):
            rows = []
            for index in range(count):
                row = {"sentence1" if pair else "sentence": _sentence(rng)}
                if pair:
                    row["sentence2"] = _sentence(rng)
                label = round(rng.uniform(0, 5), 2) if regression else index % 2
                row.update(label=-1 if split == "test" else label, idx=index)
                rows.append(row)
            _write(root / name / f"{split}.jsonl", rows)
        folders[name] = root / name
    return folders


def write_suite(path: Path, folders: dict[str, Path], **metrics: Any) -> Path:
    fields = {
        "single": ("sentence", None),
        "pair": ("sentence1", "sentence2"),
        "regression": ("sentence1", "sentence2"),
    }
    chosen = {"single": "mcc", "pair": ["f1", "accuracy"], "regression": ["pearson", "spearman"], **metrics}
    lines = ["tasks:"]
    for name in folders:
        text, pair, metric = *fields[name], chosen[name]
        lines += [f"  - name: {name}", f"    task: {folders[name]}", f"    text_field: {text}"]
        lines += [f"    pair_field: {pair or 'null'}", "    label_field: label", f"    metric: {json.dumps(metric)}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def figures_of(record: dict[str, Any]) -> dict[str, list[tuple[int, list[float]]]]:
    """Each task's (seed, figures): what a scorecard measured, without the seconds it took."""
    return {name: [(run["seed"], run["figures"]) for run in task["runs"]] for name, task in record["tasks"].items()}


@pytest.fixture(scope="module")
def glue_like(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return glue_layout_tasks(tmp_path_factory.mktemp("glue-like"))


def test_a_test_split_of_hidden_labels_in_a_folder_is_replaced_by_validation_as_on_the_hub(
    glue_like: dict[str, Path],
) -> None:
    task = load_task(str(glue_like["single"]), TaskFields("sentence"))
    assert task.test.source.endswith("validation.jsonl") and len(task.test) == 12
    assert "held out" in task.valid.source and len(task.train) + len(task.valid) == 24


def test_a_suite_of_local_tasks_prints_its_table_and_writes_every_seed(
    trained_run: Path, glue_like: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    model = trained_run / "checkpoints" / "latest"
    file = write_suite(tmp_path / "suite.yaml", glue_like)
    out = tmp_path / "scores.json"
    code, err = run_cli(
        capsys, "probe", "--model", str(model), "--suite", str(file), "--seeds", "2", "--out", str(out), *FAST
    )
    assert code == 0, err
    assert "scorecard: task 1 of 3 (single), seed 1 of 2" in err and "left" in err[-1]  # an ETA once one is done
    record = json.loads(out.read_text())
    assert record["finished"] and set(record["tasks"]) == {"single", "pair", "regression"}
    for name, metric in (("single", "mcc"), ("pair", "f1/accuracy"), ("regression", "pearson/spearman")):
        task = record["tasks"][name]
        assert task["metric"] == metric and [run["seed"] for run in task["runs"]] == [0, 1]
        assert task["score"] == pytest.approx(statistics.median(run["score"] for run in task["runs"]))
        assert all(len(run["figures"]) == len(metric.split("/")) for run in task["runs"])
    assert record["average"] == pytest.approx(statistics.fmean(t["score"] for t in record["tasks"].values()))
    assert record["reference"] is None  # a 2-layer model of width 32 is no published miniature
    capsys.readouterr()
    api_record = api.scorecard(model, str(file), seeds=2, out=tmp_path / "again.json", device="cpu", **SETTINGS)
    assert figures_of(api_record) == figures_of(record)  # the same scores from the API: deterministic on the CPU


def test_an_interrupted_suite_keeps_its_finished_seeds_and_resume_does_only_the_rest(
    trained_run: Path, glue_like: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = trained_run / "checkpoints" / "latest"
    folders = {name: Path(shutil.copytree(glue_like[name], tmp_path / name)) for name in ("single", "pair")}
    file = write_suite(tmp_path / "suite.yaml", folders)
    whole = api.scorecard(model, str(file), seeds=2, out=tmp_path / "whole.json", device="cpu", **SETTINGS)
    real, calls = suite_module.probe_encoder, []

    def interrupted_at_the_third(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[3].seed)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C amid the first seed of the second task
        return real(*args, **kwargs)

    monkeypatch.setattr(suite_module, "probe_encoder", interrupted_at_the_third)
    out = tmp_path / "scores.json"
    with pytest.raises(KeyboardInterrupt):
        api.scorecard(model, str(file), seeds=2, out=out, device="cpu", **SETTINGS)
    kept = json.loads(out.read_text())
    assert not kept["finished"] and [len(t["runs"]) for t in kept["tasks"].values()] == [2, 0]
    with pytest.raises(UserError, match="--resume"):
        api.scorecard(model, str(file), seeds=2, out=out, device="cpu", **SETTINGS)  # never started afresh
    pair = folders["pair"].rename(tmp_path / "moved")
    with pytest.raises(UserError, match="task 'pair'"):  # a task gone: one error, the finished seeds kept
        api.scorecard(model, str(file), seeds=2, out=out, resume=True, device="cpu", **SETTINGS)
    assert json.loads(out.read_text()) == kept
    pair.rename(folders["pair"])
    calls.clear()
    resumed = api.scorecard(model, str(file), seeds=2, out=out, resume=True, device="cpu", **SETTINGS)
    assert calls == [0, 1]  # only the second task's seeds
    assert figures_of(resumed) == figures_of(whole) and resumed["average"] == whole["average"]


def interrupted_at_the_second_seed(monkeypatch: pytest.MonkeyPatch, model: Path, suite: Path, out: Path) -> Path:
    """A two-seed scorecard of `model` stopped by Ctrl-C as its second seed starts: `out`, holding the first."""
    real = suite_module.probe_encoder

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        if args[3].seed == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(suite_module, "probe_encoder", interrupted)
        with pytest.raises(KeyboardInterrupt):
            api.scorecard(model, str(suite), seeds=2, out=out, **FAST_API)
    return out


def test_a_resumed_scorecard_knows_its_model_by_its_weights_not_its_name(
    finished_run: Path, glue_like: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scorecard interrupted on RUN/checkpoints/latest, resumed once the run moved on (latest names another step):
    refused, since its seeds would be two models'; resumed with --model the step it scored (another name, the same
    weights), it finishes with that model's seeds alone, as a scorecard never interrupted does."""
    checkpoints = finished_run / "checkpoints"
    latest = checkpoints / "latest"
    latest.unlink()
    latest.symlink_to("step-2")  # the run at step 2
    file = write_suite(tmp_path / "suite.yaml", {"single": glue_like["single"]})
    whole = api.scorecard(checkpoints / "step-2", str(file), seeds=2, out=tmp_path / "whole.json", **FAST_API)
    out = interrupted_at_the_second_seed(monkeypatch, latest, file, tmp_path / "scores.json")
    kept = json.loads(out.read_text())
    latest.unlink()
    latest.symlink_to("step-4")  # the run moved on
    with pytest.raises(UserError, match="scored other weights .* resume with --model naming the model it scored"):
        api.scorecard(latest, str(file), seeds=2, out=out, resume=True, **FAST_API)
    assert json.loads(out.read_text()) == kept
    resumed = api.scorecard(checkpoints / "step-2", str(file), seeds=2, out=out, resume=True, **FAST_API)
    assert resumed["finished"] and figures_of(resumed) == figures_of(whole)
    fresh = api.scorecard(latest, str(file), seeds=1, out=tmp_path / "new.json", **FAST_API)  # the other fix
    assert fresh["finished"] and fresh["weights"] != resumed["weights"]


def test_a_resumed_scorecard_knows_each_task_by_its_examples_not_its_folder(
    trained_run: Path, glue_like: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task folder whose files changed since the first seeds were scored: --resume is refused (its median would mix
    two datasets); with the files restored, it finishes."""
    model = trained_run / "checkpoints" / "latest"
    single = Path(shutil.copytree(glue_like["single"], tmp_path / "single"))
    file = write_suite(tmp_path / "suite.yaml", {"single": single})
    out = interrupted_at_the_second_seed(monkeypatch, model, file, tmp_path / "scores.json")
    train = single / "train.jsonl"
    original = train.read_text()
    train.write_text(original.replace('"label": 0', '"label": 1', 3))
    with pytest.raises(UserError, match="task 'single' holds other examples than when"):
        api.scorecard(model, str(file), seeds=2, out=out, resume=True, **FAST_API)
    train.write_text(original)
    assert api.scorecard(model, str(file), seeds=2, out=out, resume=True, **FAST_API)["finished"]


def test_the_checkpoints_card_and_report_show_its_scorecard(
    finished_run: Path, glue_like: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    model = finished_run / "checkpoints" / "latest"
    file = write_suite(tmp_path / "suite.yaml", {"regression": glue_like["regression"]})
    code, err = run_cli(capsys, "probe", "--model", str(model), "--suite", str(file), "--seeds", "1", *FAST)
    assert code == 0, err
    step = model.resolve()
    assert (step / "scorecard.json").is_file() and foreign_files(step) == []  # still provably mlmtrain's
    assert str(tmp_path) not in (step / "scorecard.json").read_text()  # tasks and suite by name, as the card names them
    card = (step / "README.md").read_text()
    assert "## Scorecard: `suite.yaml`" in card and "| regression | pearson/spearman |" in card
    assert card.index("## Scorecard") < card.index("## How to load")
    run = load_run(finished_run)
    assert run.scorecard is not None and run.scorecard[0] == int(step.name.removeprefix("step-"))
    assert "<h2>Scorecard</h2>" in build_page([run], "steps", {})


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written


@pytest.mark.parametrize(
    "suite, needles",
    [
        ("superglue", ("--suite 'superglue'", "glue", ".yaml")),
        ("missing-task", ("task 'single'", "does not exist")),
        ("pearson-on-classes", ("task 'single'", "pearson does not fit", "accuracy, f1 or mcc")),
        ("accuracy-on-floats", ("task 'regression'", "accuracy does not fit", "pearson or spearman")),
        ("unknown-metric", ("metric 'auc'", "accuracy | f1 | mcc | pearson | spearman")),
    ],
)
def test_a_bad_suite_is_one_line_and_writes_nothing(
    suite: str,
    needles: tuple[str, ...],
    trained_run: Path,
    glue_like: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    folders = {**glue_like, "single": tmp_path / "nowhere"} if suite == "missing-task" else glue_like
    metrics = {
        "pearson-on-classes": {"single": "pearson"},
        "accuracy-on-floats": {"regression": "accuracy"},
        "unknown-metric": {"single": "auc"},
    }.get(suite, {})
    spec = suite if suite == "superglue" else str(write_suite(tmp_path / "suite.yaml", folders, **metrics))
    out = tmp_path / "scores.json"
    model = str(trained_run / "checkpoints" / "latest")
    code, err = run_cli(capsys, "probe", "--model", model, "--suite", spec, "--out", str(out), *FAST)
    assert code == 2
    assert_one_error_line(err, *needles)
    assert not out.exists()


def test_a_scorecard_never_replaces_a_file_mlmtrain_did_not_write(
    trained_run: Path, glue_like: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "notes.json"
    out.write_text('{"mine": true}\n')
    file = write_suite(tmp_path / "suite.yaml", glue_like)
    model = str(trained_run / "checkpoints" / "latest")
    code, err = run_cli(capsys, "probe", "--model", model, "--suite", str(file), "--out", str(out), *FAST)
    assert code == 2 and out.read_text() == '{"mine": true}\n'
    assert_one_error_line(err, str(out), "not a scorecard mlmtrain wrote", "--out")


def test_pearson_on_whole_number_labels_names_the_float_labels_that_then_score_a_regression(
    trained_run: Path, glue_like: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Labels 0..5 written as whole numbers are classes: pearson on them is refused, naming the fix a user of STS-B
    means (float labels: a regression) beside the other (a classification metric); written as floats, it scores."""
    folder = tmp_path / "regression"
    for split in ("train", "validation", "test"):
        rows = [json.loads(line) for line in (glue_like["regression"] / f"{split}.jsonl").read_text().splitlines()]
        _write(folder / f"{split}.jsonl", [{**row, "label": round(row["label"])} for row in rows])
    file = write_suite(tmp_path / "suite.yaml", {"regression": folder}, regression="pearson")
    model = str(trained_run / "checkpoints" / "latest")
    command = ["probe", "--model", model, "--suite", str(file), "--seeds", "1", "--out", str(tmp_path / "s.json")]
    code, err = run_cli(capsys, *command, *FAST)
    assert code == 2
    assert_one_error_line(err, "metric pearson does not fit its 5 classes", "write the labels as floats (3.0, not 3)")
    for split in ("train", "validation"):  # test's labels are hidden (-1): validation is scored
        path = folder / f"{split}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        _write(path, [{**row, "label": float(row["label"])} for row in rows])
    code, err = run_cli(capsys, *command, *FAST)
    assert code == 0, err
    assert json.loads((tmp_path / "s.json").read_text())["tasks"]["regression"]["metric"] == "pearson"


def test_a_scorecard_out_inside_what_it_reads_is_refused_before_any_work(
    finished_run: Path, glue_like: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """--out apart from the model, the suite file and every task folder, through links too: one line before any
    fine-tuning (the suite file, today taken for "not a scorecard", is named as what it is); the fix works."""
    model = finished_run / "checkpoints" / "latest"
    single = Path(shutil.copytree(glue_like["single"], tmp_path / "single"))
    file = write_suite(tmp_path / "suite.yaml", {"single": single})
    (tmp_path / "to-model").symlink_to(model)
    cases = {
        model / "card.json": f"lies inside --model {model}",
        tmp_path / "to-model" / "card.json": "lies inside --model",
        file: f"is --suite {file}",
        single / "card.json": f"lies inside task 'single' {single}",
    }
    before = {folder: snapshot(folder) for folder in (finished_run, single)}
    for out, needle in cases.items():
        code, err = run_cli(capsys, "probe", "--model", str(model), "--suite", str(file), "--out", str(out), *FAST)
        assert code == 2, (out, err)
        assert_one_error_line(err, f"--out {out}", needle, "pass --out a .json file outside it")
        assert "scorecard: task" not in "\n".join(err)  # refused before any fine-tuning
    assert {folder: snapshot(folder) for folder in before} == before
    out = tmp_path / "card.json"
    code, err = run_cli(
        capsys, "probe", "--model", str(model), "--suite", str(file), "--out", str(out), "--seeds", "1", *FAST
    )
    assert code == 0, err
    assert json.loads(out.read_text())["finished"]


def test_an_unreachable_hub_task_is_one_line_naming_it(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No network: the task that could not be fetched, and that a local folder works, at once; nothing written."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a port nothing listens on
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    out = tmp_path / "scores.json"
    model = str(trained_run / "checkpoints" / "latest")
    code, err = run_cli(capsys, "probe", "--model", model, "--suite", "glue", "--out", str(out), *FAST)
    assert code == 2 and not out.exists()
    assert_one_error_line(err, "task 'cola'", "hf:glue/cola", "unreachable", "task folder")
