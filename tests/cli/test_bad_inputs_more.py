"""More bad input, found by trying the tool as a careless or hostile user would: a model folder whose tokenizer is
larger than its embeddings, run folders named with `$`, numbers too large for a float, a one-cycle run's warm-up,
half-empty metrics, label cells left empty, a probe of many classes, ELECTRA's generator scored on its own,
non-finite config values, a config that is a folder, and old-Mac line ends. Each one answers in one line (or, for
text that can be read, reads it right), with no traceback.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from mlmtrain.cli.app import main as cli_main
from mlmtrain.config import DataConfig, TokenizerConfig, load_config
from mlmtrain.data.sources import corpus_splits, open_corpus
from mlmtrain.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.evaluate.probe import (
    LiveProbe,
    PreparedTask,
    ProbeDiverged,
    ProbeSettings,
    classification_scores,
    linear_probe,
)
from mlmtrain.evaluate.probe import (
    ranks as mean_ranks,
)
from mlmtrain.evaluate.tasks import TaskFields, load_task
from mlmtrain.model.bert import build_model
from mlmtrain.report import health
from mlmtrain.report import page as report
from mlmtrain.report.rundata import load_run, read_metrics

from ..helpers import TINY_MODEL, WORDS, assert_one_error_line, run_cli, write_corpus
from ..report.test_report import healthy_spec, read_page, verdicts_of, write_run

CPU = torch.device("cpu")
HUGE = int("9" * 400)  # an integer JSON and YAML read exactly and no float holds


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def two_class_rows(count: int) -> list[dict[str, Any]]:
    return [{"text": " ".join(WORDS[i % 7 : i % 7 + 4]), "label": ["odd", "even"][i % 2]} for i in range(count)]


def probe_args(model: Path, task: Path) -> list[str]:
    return ["--model", str(model), "--task", str(task), "--max-length", "32", "--device", "cpu"]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly initialised masked LM and its tokenizer (a few hundred tokens), saved as a Hugging Face folder."""
    folder = tmp_path_factory.mktemp("model")
    texts = write_corpus(folder.parent / "model-corpus.txt", 200, seed=4).read_text().splitlines()
    save_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=300, min_frequency=1)), folder, TokenizerConfig())
    tokenizer = load_tokenizer(folder)
    torch.manual_seed(0)
    build_model(TINY_MODEL, len(tokenizer), tokenizer.pad_token_id).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("task")
    for split, count in (("train", 24), ("valid", 8), ("test", 8)):
        write_jsonl(folder / f"{split}.jsonl", two_class_rows(count))
    return folder


# ---------------------------------------------------------------------------------------------
# A tokenizer with more tokens than the model has embedding rows


@pytest.fixture(scope="module")
def mismatched_folder(model_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tokenizer of `model_folder` beside a model of 40 embedding rows: ids past 40 index nothing."""
    folder = tmp_path_factory.mktemp("mismatched")
    for name in model_folder.iterdir():
        if name.name.startswith(("tokenizer", "special_tokens", "vocab")):
            (folder / name.name).write_bytes(name.read_bytes())
    tokenizer = load_tokenizer(folder)
    assert len(tokenizer) > 40
    build_model(replace(TINY_MODEL, max_position_embeddings=128), 40, tokenizer.pad_token_id).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("command", ["probe", "eval-perplexity", "fill-mask"])
def test_a_tokenizer_larger_than_the_embeddings_is_one_line(
    command: str, mismatched_folder: Path, task: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`probe` used to fail on an IndexError deep in the embedding; every command that pairs the model with its
    tokenizer now says, before the first batch, that the tokenizer does not belong to the model."""
    text = tmp_path / "text.txt"
    write_corpus(text, 40, seed=5)
    args = {
        "probe": ["--task", str(task), "--mode", "linear", "--max-length", "32"],
        "eval-perplexity": ["--data", str(text), "--seq-len", "32"],
        "fill-mask": ["the quick [MASK] fox"],
    }[command]
    code, lines = run_cli(capsys, command, "--model", str(mismatched_folder), "--device", "cpu", *args)
    assert code == 2
    assert_one_error_line(lines, "tokens but the model only 40 embedding rows", "does not belong to this model")


# ---------------------------------------------------------------------------------------------
# Run folders named with `$`: text, never mathtext


@pytest.mark.parametrize("name", ["lr$1e-3^$", "cost$5-vs$10", "price $5"])
def test_a_run_name_with_dollar_signs_is_drawn_as_its_text(name: str, tmp_path: Path) -> None:
    """`lr$1e-3^$` used to stop the report with a mathtext traceback, and `cost$5-vs$10` was drawn as math."""
    pytest.importorskip("matplotlib")
    folder = write_run(tmp_path / name, healthy_spec())
    page = read_page(report.write_report([folder]))
    legend = " ".join(page.figures["train-loss"]["text"])
    assert name in legend, legend
    assert page.says(name)


# ---------------------------------------------------------------------------------------------
# Values no float holds, and values that are not numbers


def test_metric_values_too_large_for_a_float_are_skipped_with_a_note(tmp_path: Path) -> None:
    """A 400-digit loss used to stop `report` (and `report --check`) with an OverflowError."""
    spec = healthy_spec()
    spec["train"][3]["loss"] = HUGE
    spec["train"][5]["tokens"] = HUGE
    spec["extra"].append({"step": HUGE, "loss": 1.0})  # a step the int64 series cannot hold: an unreadable line
    folder = write_run(tmp_path / "run", spec)
    run = load_run(folder)
    assert len(run.series["loss"]) == len(spec["train"]) - 1
    assert any("2 value(s)" in note and "not numbers" in note and "loss (line 4)" in note for note in run.notes)
    assert any("1 unreadable line(s)" in note for note in run.notes), run.notes
    assert report.check_runs([folder]) is False
    assert read_page(report.write_report([folder])).says("too large for one")


def test_text_where_a_number_belongs_is_noted(tmp_path: Path) -> None:
    """Text values used to vanish from the series with no word."""
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": s, "tokens": s * 10, "loss": 5.0 - s * 0.1, "grad_norm": 1.0} for s in range(1, 8)]
    lines[2]["loss"], lines[4]["loss"], lines[5]["grad_norm"] = "high", [1.0], "1.5"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    series, notes = read_metrics(path)
    assert list(series["loss"].step) == [1, 2, 4, 6, 7]
    assert notes == [
        "3 value(s) in metrics.jsonl that are not numbers (or too large for one) skipped: grad_norm (line 6); "
        "loss (line 3, 5)"
    ]


def test_the_note_names_five_keys_at_most(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, **{f"key{i}": "text" for i in range(7)}}) + "\n")
    _, notes = read_metrics(path)
    assert notes[0].count("(line 1)") == 5 and notes[0].endswith("key4 (line 1); ..."), notes


def test_a_line_nested_too_deeply_is_an_unreadable_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n' + "[" * 100_000 + "\n" + '{"step": 2, "loss": 1.0}\n')
    series, notes = read_metrics(path)
    assert list(series["loss"].step) == [1, 2]
    assert notes == ["1 unreadable line(s) in metrics.jsonl skipped (line 2)"]


def test_settings_no_float_holds_leave_a_check_unjudged(tmp_path: Path) -> None:
    spec = healthy_spec()
    spec["config"]["optim"]["warmup_steps"] = HUGE
    verdict = verdicts_of(write_run(tmp_path / "run", spec))["warm-up"]
    assert verdict.status == health.UNKNOWN


@pytest.mark.parametrize(
    "shape", [[HUGE], [2**40, 2**40], "12", [1.5], [-3]], ids=["huge", "product", "text", "float", "negative"]
)
def test_a_checkpoint_header_with_shapes_no_count_holds_leaves_the_size_unknown(shape: Any, tmp_path: Path) -> None:
    """A hand-made safetensors header of a 400-digit shape used to stop the report on an OverflowError."""
    folder = write_run(tmp_path / "run", healthy_spec())
    header = json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}).encode()
    weights = folder / "checkpoints" / "step-2000" / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", len(header)) + header)
    assert load_run(folder).parameters is None
    assert verdicts_of(folder)["tokens per parameter"].status == health.UNKNOWN
    assert report.check_runs([folder]) is False


@pytest.mark.parametrize("tokens", [HUGE, "many", -5, None, 1.5], ids=["huge", "text", "negative", "null", "float"])
def test_store_figures_that_are_not_counts_leave_their_checks_unjudged(tokens: Any, tmp_path: Path) -> None:
    folder = write_run(tmp_path / "run", healthy_spec())
    meta = json.loads((folder / "tokens" / "meta.json").read_text())
    meta["splits"]["train"]["tokens"] = meta["splits"]["validation"]["tokens"] = tokens
    (folder / "tokens" / "meta.json").write_text(json.dumps(meta))
    verdicts = verdicts_of(folder)
    for check in ("overfitting", "unknown tokens", "tokens per word"):
        assert verdicts[check].status == health.UNKNOWN, verdicts[check]
    assert report.check_runs([folder]) is False


def test_an_empty_metrics_file_leaves_tokens_per_parameter_unjudged(tmp_path: Path) -> None:
    """With a checkpoint but no metric line, the check used to fail on "0 tokens seen"."""
    spec = healthy_spec()
    spec["train"], spec["evals"] = [], []
    folder = write_run(tmp_path / "run", spec)
    (folder / "metrics.jsonl").write_text("")
    verdict = verdicts_of(folder)["tokens per parameter"]
    assert verdict.status == health.UNKNOWN, verdict
    assert "no token count logged yet" in verdict.message
    assert report.check_runs([folder]) is False  # nothing logged is nothing failed


@pytest.mark.parametrize("peak,status", [(0.5, health.OK), (0.8, health.FAIL)])
def test_the_warm_up_of_a_one_cycle_run_is_its_cycle_peak(peak: float, status: str, tmp_path: Path) -> None:
    """One-cycle ignores optim.warmup_steps, yet the check failed on it ("lower optim.warmup_steps": a fix that
    changes nothing); it judges the share of the run the learning rate rises over, optim.cycle_peak."""
    spec = healthy_spec()
    spec["config"]["optim"] = {"schedule": "one-cycle", "warmup_steps": 1500, "cycle_peak": peak}
    verdict = verdicts_of(write_run(tmp_path / "run", spec))["warm-up"]
    assert verdict.status == status, verdict
    assert f"rises over {peak:.1%} of the run" in verdict.message
    assert "warmup_steps" not in verdict.message + verdict.fix
    if status == health.FAIL:
        assert "optim.cycle_peak" in verdict.fix


@pytest.mark.parametrize("where", ["train", "test"])
def test_a_regression_label_too_large_for_a_float_is_one_line(
    where: str, model_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A 400-digit label used to stop the probe with an OverflowError traceback."""
    rows = [{"text": " ".join(WORDS[i : i + 3]), "label": i / 4} for i in range(12)]
    for split in ("train", "valid", "test"):
        write_jsonl(tmp_path / "t" / f"{split}.jsonl", rows)
    bad = [dict(row) for row in rows]
    bad[6]["label"] = HUGE
    write_jsonl(tmp_path / "t" / f"{where}.jsonl", bad)
    code, lines = run_cli(capsys, "probe", *probe_args(model_folder, tmp_path / "t"))
    assert code == 2
    assert_one_error_line(lines, f"{where}.jsonl record 7", "is not a finite number", "(400 characters)")


# ---------------------------------------------------------------------------------------------
# Probe tasks and the probe


def test_an_empty_label_cell_names_its_record(
    model_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """One empty cell in a CSV of integer labels used to say only "mixes label types (int, str)"."""
    folder = tmp_path / "t"
    folder.mkdir()
    rows = [f"{' '.join(WORDS[i : i + 3])},{i % 2}\n" for i in range(10)]
    for split in ("valid", "test"):
        (folder / f"{split}.csv").write_text("text,label\n" + "".join(rows))
    rows[3] = "fox jumps over,\n"
    (folder / "train.csv").write_text("text,label\n" + "".join(rows))
    code, lines = run_cli(capsys, "probe", *probe_args(model_folder, folder))
    assert code == 2
    assert_one_error_line(lines, "train.csv record 4", "no usable label", "''")


def test_labels_of_two_types_name_the_odd_record(tmp_path: Path) -> None:
    rows = [{"text": "a b", "label": i % 2} for i in range(9)]
    rows[5]["label"] = "one"
    for split in ("train", "valid", "test"):
        write_jsonl(tmp_path / f"{split}.jsonl", rows)
    with pytest.raises(UserError, match=r"train.jsonl record 6: label 'one' is str while most labels are int"):
        load_task(str(tmp_path), TaskFields())


def test_a_split_file_that_is_a_folder_says_so(model_folder: Path, task: Path, capsys: pytest.CaptureFixture) -> None:
    """`--train FOLDER` used to say the file "does not exist"."""
    code, lines = run_cli(capsys, "probe", *probe_args(model_folder, task), "--train", str(task))
    assert code == 2
    assert_one_error_line(lines, f"--train {task} is a folder", "as --task")


def test_a_live_probe_that_diverges_names_the_config_key(model_folder: Path, task: Path) -> None:
    """The live probe's message used to say "try a lower --lr", an option pretrain does not have."""
    settings = ["probe.mode=finetune", "probe.lr=1e30", "probe.max_length=32", "probe.batch_size=4"]
    cfg = load_config(None, [f"probe.task={task}", *settings])
    tokenizer = load_tokenizer(model_folder)
    live = LiveProbe(cfg.probe, load_task(str(task), TaskFields()), tokenizer, CPU, seed=0)
    mlm = build_model(TINY_MODEL, len(tokenizer), tokenizer.pad_token_id)
    with pytest.raises(ProbeDiverged, match=r"try a lower probe\.lr than 1e\+30"):
        live.run(mlm)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_probe_lr_that_is_not_finite_is_one_line(
    value: str, model_folder: Path, task: Path, capsys: pytest.CaptureFixture
) -> None:
    code, lines = run_cli(capsys, "probe", *probe_args(model_folder, task), "--lr", value)
    assert code == 2
    assert_one_error_line(lines, "--lr must be a finite number > 0")


def test_the_linear_probe_shows_its_progress(
    model_folder: Path, task: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A linear probe of 10,000 classes ran for minutes with nothing on the screen."""
    import mlmtrain.runtime.progress

    monkeypatch.setattr(mlmtrain.runtime.progress, "_is_terminal", lambda stream: True)  # bars as on a terminal
    settings = ProbeSettings(mode="linear", max_length=32, progress=True)
    tokenizer = load_tokenizer(model_folder)
    prepared = PreparedTask.build(load_task(str(task), TaskFields()), tokenizer, settings)
    encoder = build_model(TINY_MODEL, len(tokenizer), tokenizer.pad_token_id).bert
    capsys.readouterr()
    linear_probe(encoder, prepared, settings, CPU)
    err = capsys.readouterr().err
    assert "features:" in err and "/40 [" in err, err  # 24 + 8 + 8 examples
    assert "linear fit:" in err, err


class CountedOps(TorchDispatchMode):
    """Counts the torch operations run inside it: a pass over the examples per class is an operation per class."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def scoring_ops(classes: int) -> tuple[dict[str, float], torch.Tensor, int]:
    """Macro-F1 of 20,000 predictions among `classes` classes and the ranks of 20,000 values (half as many distinct
    ones): (scores, ranks, the torch operations both took)."""
    generator = torch.Generator().manual_seed(0)
    gold = torch.randint(0, classes, (20_000,), generator=generator)
    guess = torch.randint(0, classes, (20_000,), generator=generator)
    predicted = torch.where(torch.rand(20_000, generator=generator) < 0.5, gold, guess)
    values = torch.randint(0, classes // 2, (20_000,), generator=generator).float()
    with CountedOps() as counted:
        scores, ranks = classification_scores(predicted, gold, 0), mean_ranks(values)
    return scores, ranks, counted.ops


def test_scores_of_many_classes_take_one_pass() -> None:
    """Macro-F1 looped over the classes, each loop a pass over the examples: 4 s at 10,000 classes and 20,000
    examples, five times per linear probe; Spearman's ranks looped likewise over the distinct values. Counted in
    torch operations, not seconds: as many for 10,000 classes as for 10."""
    scores, ranks, ops = scoring_ops(10_000)
    assert ops == scoring_ops(10)[2]
    # the same figures as the definitions, on a sample small enough to count by hand
    small_gold, small_predicted = torch.tensor([0, 0, 1, 2, 2, 2]), torch.tensor([0, 1, 1, 2, 2, 3])
    f1 = {0: 2 / 3, 1: 2 / 3, 2: 2 * 2 / (2 * 2 + 0 + 1), 3: 0.0}
    assert classification_scores(small_predicted, small_gold, 2)["macro_f1"] == pytest.approx(sum(f1.values()) / 4)
    assert mean_ranks(torch.tensor([3.0, 1.0, 3.0, 2.0])).tolist() == [2.5, 0.0, 2.5, 1.0]
    assert 0 < scores["macro_f1"] < 1 and ranks.sum() == pytest.approx(20_000 * 19_999 / 2)


# ---------------------------------------------------------------------------------------------
# ELECTRA's generator scored on its own agrees with its checkpoint


def test_eval_perplexity_of_an_electra_checkpoint_and_of_its_generator_agree(
    model_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The generator's folder used to be scored at the default --seq-len (128, beyond this model's 64 positions)
    while its checkpoint read data.seq_len 32 from the mlmtrain.yaml beside the discriminator."""
    checkpoint = tmp_path / "step-10"
    generator = checkpoint / "generator"
    generator.mkdir(parents=True)
    for name in model_folder.iterdir():
        (generator / name.name).write_bytes(name.read_bytes())
    (checkpoint / "config.json").write_text(json.dumps({"architectures": ["ElectraForPreTraining"]}))
    (checkpoint / "mlmtrain.yaml").write_text(yaml.safe_dump({"data": {"seq_len": 32}}))
    text = tmp_path / "text.txt"
    write_corpus(text, 60, seed=6)
    outputs = []
    for folder in (checkpoint, generator):
        capsys.readouterr()
        cli_main(["eval-perplexity", "--model", str(folder), "--data", str(text), "--json", "--device", "cpu"])
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0]["seq_len"] == outputs[1]["seq_len"] == 32
    assert outputs[0]["perplexity"] == outputs[1]["perplexity"]


# ---------------------------------------------------------------------------------------------
# Config values and files


@pytest.mark.parametrize(
    "assignment,needle",
    [
        ("optim.lr=.inf", "optim.lr must be a finite number (got inf)"),
        ("optim.lr=.nan", "optim.lr must be a finite number (got nan)"),
        ("optim.lr=-.inf", "optim.lr must be a finite number (got -inf)"),
        ("optim.lr=1e999", "optim.lr must be a finite number"),
        (f"optim.lr={HUGE}", "optim.lr must be a finite number (got 999999999999... (400 characters))"),
        ("report.spike_factor=.inf", "report.spike_factor must be a finite number"),
        ("masking.mlm_probability=nan", "masking.mlm_probability must be a finite number"),
    ],
)
def test_a_float_setting_that_is_not_finite_is_one_line(
    assignment: str, needle: str, capsys: pytest.CaptureFixture
) -> None:
    """`--set optim.lr=.inf` used to be accepted (and a 400-digit float setting stopped on an OverflowError)."""
    code, lines = run_cli(capsys, "config", "show", "--set", assignment)
    assert code == 2
    assert_one_error_line(lines, needle)


def test_a_config_that_is_a_folder_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """It used to say the file "does not exist"."""
    code, lines = run_cli(capsys, "config", "show", "--config", str(tmp_path))
    assert code == 2
    line = assert_one_error_line(lines, f"{tmp_path} is a folder, not a file", "pass a YAML file to --config")
    assert "does not exist" not in line


# ---------------------------------------------------------------------------------------------
# Old-Mac text: lines end in a lone carriage return


@pytest.mark.parametrize("ending", ["\r", "\r\n", "\n"], ids=["cr", "crlf", "lf"])
@pytest.mark.parametrize("documents", ["line", "paragraph"])
def test_carriage_returns_end_lines(ending: str, documents: str, tmp_path: Path) -> None:
    """A text file with CR-only line ends used to be read as one document, so its validation split was empty."""
    lines = write_corpus(tmp_path / "lf.txt", 200, seed=7).read_text().splitlines()
    separator = ending if documents == "line" else ending * 2
    (tmp_path / "text.txt").write_bytes(separator.join(lines).encode() + ending.encode())
    data = DataConfig(train=str(tmp_path / "text.txt"), validation=None, txt_documents=documents)
    assert list(open_corpus(data.train, data)) == lines
    train, validation = corpus_splits(data)
    assert 0 < len(list(validation)) < len(list(train))


def test_a_lone_carriage_return_ends_a_jsonl_or_csv_line(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(b'{"text": "one"}\r{"text": "two"}\r')
    (tmp_path / "a.csv").write_bytes(b'text\rone\r"two,\rthree"\r')
    data = DataConfig()
    assert list(open_corpus(str(tmp_path / "a.jsonl"), data)) == ["one", "two"]
    assert list(open_corpus(str(tmp_path / "a.csv"), data)) == ["one", "two,\rthree"]


def test_plain_text_keeps_its_other_characters(tmp_path: Path) -> None:
    """Only \\r and \\r\\n end lines: a form feed or a Unicode line separator inside a line stays in it."""
    (tmp_path / "a.txt").write_bytes("one\x0ctwo\u2028three\rfour\n".encode())
    data = DataConfig(txt_documents="line")
    assert list(open_corpus(str(tmp_path / "a.txt"), data)) == ["one\x0ctwo\u2028three", "four"]
