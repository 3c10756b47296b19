"""`mlmtrain probe` and the live probe: real tiny models and real task files.

The topic task is built so that pretraining must matter: three topics of twenty words each; the probe's train split
uses only the first ten words of each topic, valid and test only the other ten. An untrained encoder has nothing
that links a test word to its topic, so it scores at chance; one pretrained on topical documents has learned which
words go together. Scores, determinism, JSON keys, regression and pair tasks, --save, the live probe through a
resume, and every bad input of the command.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from mlmtrain.cli.app import main as cli_main
from mlmtrain.config import TokenizerConfig, load_config
from mlmtrain.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from mlmtrain.evaluate.probe import (
    PreparedTask,
    ProbeSettings,
    classification_scores,
    encoder_config,
    probe_encoder,
    regression_scores,
)
from mlmtrain.evaluate.tasks import TaskFields, load_task
from mlmtrain.model.bert import build_model
from mlmtrain.train.loop import pretrain

from ..helpers import CHILD_ENV, TINY_MODEL, assert_one_error_line, run_cli, snapshot, tiny_overrides

CPU = torch.device("cpu")
TOPICS = {
    "fruit": "apple pear plum grape lemon mango peach cherry melon berry lime fig date kiwi guava papaya olive apricot "
    "quince orange".split(),
    "tools": "hammer saw drill wrench chisel pliers rake shovel ladder spade axe file clamp level ruler tape vise awl "
    "hoe trowel".split(),
    "weather": "rain snow wind storm cloud fog hail sleet frost thunder mist drizzle breeze gale sun heat cold ice dew "
    "haze".split(),
}
FILLERS = "the a and with of some".split()


def sentence(rng: random.Random, words: list[str], length: int) -> str:
    return " ".join(rng.choice(words) if rng.random() < 0.7 else rng.choice(FILLERS) for _ in range(length))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def topic_rows(rng: random.Random, count: int, half: slice) -> list[dict[str, Any]]:
    names = list(TOPICS)
    return [{"text": sentence(rng, TOPICS[names[i % 3]][half], 8), "label": names[i % 3]} for i in range(count)]


@pytest.fixture(scope="module")
def topics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The topic task (train: 60 examples of words 0-9; valid 30 and test 60 of words 10-19) and a pretraining
    corpus of topical documents (all twenty words) beside it, train.txt / valid.txt."""
    root = tmp_path_factory.mktemp("topics")
    rng = random.Random(0)
    for name, count in (("train.txt", 800), ("valid.txt", 50)):
        lines = [sentence(rng, TOPICS[rng.choice(list(TOPICS))], rng.randint(8, 20)) for _ in range(count)]
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    for split, count, half in (("train", 60, slice(0, 10)), ("valid", 30, slice(10, 20)), ("test", 60, slice(10, 20))):
        write_jsonl(root / "task" / f"{split}.jsonl", topic_rows(rng, count, half))
    return root


def topic_overrides(root: Path, **extra: object) -> list[str]:
    """A model that learns the topics in a few hundred steps: every word one token, no dropout, a high lr."""
    values = {
        "train.run_dir": str(root / "run"),
        "tokenizer.vocab_size": 300,
        "tokenizer.min_frequency": 1,
        "model.hidden_size": 64,
        "model.intermediate_size": 128,
        "model.hidden_dropout": 0.0,
        "model.attention_dropout": 0.0,
        "optim.lr": 3e-3,
        "optim.warmup_steps": 10,
        "train.batch_size": 16,
        "train.eval_every": 0,
        "checkpoint.save_every": 0,
        "probe.max_length": 64,
        **extra,
    }
    return tiny_overrides(root, **values)


@pytest.fixture(scope="module")
def pretrained(topics: Path) -> Path:
    """A checkpoint pretrained on the topical corpus (800 steps: the topics are learned between 300 and 800)."""
    return pretrain(load_config(None, topic_overrides(topics, **{"train.max_steps": 800})))


@pytest.fixture(scope="module")
def untrained_folder(topics: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly initialised masked LM with a tokenizer of the topic corpus, saved as a Hugging Face folder."""
    folder = tmp_path_factory.mktemp("untrained")
    texts = (topics / "train.txt").read_text().splitlines()
    save_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=300, min_frequency=1)), folder, TokenizerConfig())
    tokenizer = load_tokenizer(folder)
    torch.manual_seed(0)
    build_model(
        replace(TINY_MODEL, max_position_embeddings=128), len(tokenizer), tokenizer.pad_token_id
    ).save_pretrained(folder)
    return folder


def run_probe(model: Path, task: Path, baseline: bool, **settings: Any):
    """(result, model) of the in-process probe, one settings object as the command builds it."""
    probe_settings = ProbeSettings(**{"max_length": 64, **settings})
    prepared = PreparedTask.build(load_task(str(task), TaskFields()), load_tokenizer(model), probe_settings)
    return probe_encoder(str(model), encoder_config(str(model)), prepared, probe_settings, CPU, baseline)


def probe_json(capsys: pytest.CaptureFixture, *args: str) -> dict[str, Any]:
    """`mlmtrain probe ARGS --json` in-process: the one JSON object it prints on stdout."""
    capsys.readouterr()
    cli_main(["probe", *args, "--json", "--device", "cpu"])
    return json.loads(capsys.readouterr().out)


FINETUNE = {"mode": "finetune", "epochs": 4, "lr": 1e-3, "batch_size": 8}


# ---------------------------------------------------------------------------------------------
# What pretraining bought


@pytest.mark.slow
@pytest.mark.parametrize("settings", [{"mode": "linear"}, FINETUNE], ids=["linear", "finetune"])
def test_a_model_pretrained_on_the_tasks_text_beats_an_untrained_one(
    pretrained: Path, topics: Path, settings: dict
) -> None:
    trained, _ = run_probe(pretrained, topics / "task", baseline=False, **settings)
    untrained, _ = run_probe(pretrained, topics / "task", baseline=True, **settings)
    assert untrained.scores["accuracy"] < 0.55  # chance is 1/3: nothing links a test word to its topic
    assert trained.scores["accuracy"] >= 0.8
    assert trained.scores["accuracy"] - untrained.scores["accuracy"] > 0.3


# ---------------------------------------------------------------------------------------------
# The command end to end


@pytest.mark.parametrize("mode", ["finetune", "linear"])
def test_command_prints_one_json_object_with_the_scores(
    untrained_folder: Path, topics: Path, mode: str, capsys: pytest.CaptureFixture
) -> None:
    args = ["--model", str(untrained_folder), "--task", str(topics / "task"), "--mode", mode, "--epochs", "1"]
    report = probe_json(capsys, *args, "--baseline")
    for key in ("accuracy", "macro_f1", "majority_accuracy", "ci95", "valid", "seconds", "train_examples", "baseline"):
        assert key in report, key
    assert report["kind"] == "classification" and report["classes"] == 3 and report["mode"] == mode
    assert report["test_examples"] == 60 and report["majority_accuracy"] == pytest.approx(1 / 3)
    low, high = report["ci95"]
    assert low <= report["accuracy"] <= high
    assert "accuracy" in report["baseline"]
    assert ("best_epoch" in report) == (mode == "finetune") and ("l2" in report) == (mode == "linear")


def test_command_table_names_the_mode_and_the_untrained_figures(
    untrained_folder: Path, topics: Path, capsys: pytest.CaptureFixture
) -> None:
    capsys.readouterr()
    cli_main(["probe", "--model", str(untrained_folder), "--task", str(topics / "task"), "--mode", "linear"])
    out = capsys.readouterr().out
    assert "linear probe on frozen mean-pooled features" in out
    assert "test accuracy" in out and "majority class" in out and "untrained accuracy" not in out


def test_same_seed_same_score_on_cpu(untrained_folder: Path, topics: Path) -> None:
    settings = {**FINETUNE, "epochs": 2}
    (first, first_model), (second, second_model), (_, other_model) = (
        run_probe(untrained_folder, topics / "task", baseline=False, seed=seed, **settings) for seed in (3, 3, 4)
    )
    assert first.scores == second.scores and first.details == second.details
    first_weights, second_weights, other_weights = (m.state_dict() for m in (first_model, second_model, other_model))
    assert all(torch.equal(first_weights[k], second_weights[k]) for k in first_weights)
    assert not torch.equal(first_weights["classifier.weight"], other_weights["classifier.weight"])  # the seed counts


def test_fine_tuning_into_a_file_writes_no_redrawn_bar(
    untrained_folder: Path, topics: Path, capsys: pytest.CaptureFixture
) -> None:
    capsys.readouterr()
    run_probe(untrained_folder, topics / "task", baseline=False, **{**FINETUNE, "epochs": 1}, progress=True)
    assert "\r" not in capsys.readouterr().err  # stderr is a file here, as under nohup or a scheduler


def test_save_keeps_an_ordinary_hf_folder_of_the_best_epoch(
    untrained_folder: Path, topics: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from transformers import AutoModelForSequenceClassification

    saved = tmp_path / "fine-tuned"
    args = ["--model", str(untrained_folder), "--task", str(topics / "task"), "--epochs", "1", "--save", str(saved)]
    report = probe_json(capsys, *args)
    assert report["saved"] == str(saved) and not list(tmp_path.glob(".fine-tuned.tmp-*"))
    model = AutoModelForSequenceClassification.from_pretrained(saved)
    assert sorted(model.config.label2id) == ["fruit", "tools", "weather"]
    assert (saved / "tokenizer.json").is_file()


def test_save_under_a_file_is_refused_before_fine_tuning(
    untrained_folder: Path, topics: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def no_training(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("fine-tuning started before --save was checked")

    monkeypatch.setattr("mlmtrain.tools.probe.probe_encoder", no_training)
    (tmp_path / "afile").write_text("mine\n")
    saved = tmp_path / "afile" / "saved"
    args = ["--model", str(untrained_folder), "--task", str(topics / "task"), "--save", str(saved)]
    code, lines = run_cli(capsys, "probe", *args, "--device", "cpu")
    assert code == 2
    assert_one_error_line(lines, f"--save {saved}", f"lies under {tmp_path / 'afile'}, which is a file")
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_a_save_through_a_link_or_into_an_input_is_refused_before_fine_tuning(
    untrained_folder: Path, topics: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--save is a new folder apart from what the probe reads: a link (to an empty folder, which the save's rename
    cannot go through), a folder inside the model or the task (also through a link into them) is refused before any
    fine-tuning, naming the fix; following it, the model is saved."""
    real = tmp_path / "empty"
    real.mkdir()
    (tmp_path / "to-empty").symlink_to(real)
    (tmp_path / "to-model").symlink_to(untrained_folder)
    model_before, task_before = snapshot(untrained_folder), snapshot(topics / "task")
    cases = {
        tmp_path / "to-empty": "is a link; set --save to a new folder (not a link)",
        untrained_folder / "tuned": f"lies inside --model {untrained_folder}, which this command only reads",
        tmp_path / "to-model" / "tuned": f"(it leads to {untrained_folder.resolve() / 'tuned'}) lies inside --model",
        topics / "task" / "tuned": "lies inside --task",
    }
    args = ["--model", str(untrained_folder), "--task", str(topics / "task"), "--epochs", "1", "--device", "cpu"]
    with monkeypatch.context() as patched:
        patched.setattr("mlmtrain.tools.probe.probe_encoder", lambda *a, **k: pytest.fail("fine-tuning started"))
        for save, needle in cases.items():
            code, lines = run_cli(capsys, "probe", *args, "--save", str(save))
            assert code == 2, lines
            assert_one_error_line(lines, f"--save {save}", needle, "new folder")
    assert snapshot(untrained_folder) == model_before and snapshot(topics / "task") == task_before
    assert not any(real.iterdir())
    code, lines = run_cli(capsys, "probe", *args, "--save", str(tmp_path / "new"))  # the fix: a new folder
    assert code == 0, lines
    assert (tmp_path / "new" / "config.json").is_file()


def test_a_failed_save_is_one_line_after_the_scores(
    untrained_folder: Path, topics: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import errno

    from transformers import PreTrainedModel

    def full_disk(self: Any, folder: Any, *args: Any, **kwargs: Any) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full_disk)
    saved = tmp_path / "fine-tuned"
    args = ["--model", str(untrained_folder), "--task", str(topics / "task"), "--epochs", "1", "--save", str(saved)]
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        cli_main(["probe", *args, "--json", "--device", "cpu"])
    captured = capsys.readouterr()
    assert done.value.code == 2
    assert_one_error_line(captured.err.strip().splitlines(), f"--save {saved}", "No space left on device")
    report = json.loads(captured.out)  # the scores of the fine-tuning are printed all the same
    assert "accuracy" in report and "saved" not in report
    assert not saved.exists() and not list(tmp_path.glob(".fine-tuned.tmp-*"))


# The process signals itself from inside the tokenizer's save, after the weights are written: the moment a real
# Ctrl-C (or a scheduler's SIGTERM) can hit, made certain.
_SIGNAL_DURING_SAVE = """
import os, signal, sys
from transformers import PreTrainedTokenizerBase
from mlmtrain.cli.app import main
signal.signal(signal.SIGINT, signal.default_int_handler)  # a test run started in the background ignores it
save = PreTrainedTokenizerBase.save_pretrained
def signalled(self, *args, **kwargs):
    os.kill(os.getpid(), getattr(signal, os.environ["PROBE_SIGNAL"]))
    return save(self, *args, **kwargs)
PreTrainedTokenizerBase.save_pretrained = signalled
main(sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_while_save_writes_leaves_no_half_written_folder(
    name: str, untrained_folder: Path, topics: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "out" / "fine-tuned"
    saved.parent.mkdir()
    args = ["probe", "--model", str(untrained_folder), "--task", str(topics / "task"), "--epochs", "1"]
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_DURING_SAVE, *args, "--device", "cpu", "--save", str(saved)],
        env={**CHILD_ENV, "PROBE_SIGNAL": name},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 130, done.stderr
    assert_one_error_line(done.stderr.strip().splitlines(), "interrupted")
    assert list(saved.parent.iterdir()) == []  # neither the folder nor its hidden temporary sibling


def test_regression_task_reports_pearson_and_spearman(
    untrained_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    rng = random.Random(5)
    fruit = TOPICS["fruit"]

    def rows(count: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(count):  # the label: the share of fruit words, a float
            share = rng.random()
            words = [rng.choice(fruit) if rng.random() < share else "rain" for _ in range(8)]
            out.append({"text": " ".join(words), "label": round(share, 3) + 0.0})
        return out

    for split, count in (("train", 60), ("valid", 20), ("test", 30)):
        write_jsonl(tmp_path / "task" / f"{split}.jsonl", rows(count))
    for mode in ("linear", "finetune"):
        args = ["--model", str(untrained_folder), "--task", str(tmp_path / "task"), "--mode", mode, "--epochs", "4"]
        report = probe_json(capsys, *args, "--lr", "3e-3", "--batch-size", "8")
        assert report["kind"] == "regression" and "accuracy" not in report
        assert -1 <= report["spearman"] <= 1 and report["pearson"] > 0.5, report  # fruit words are counted


def test_pair_task_with_text_a_and_text_b(untrained_folder: Path, tmp_path: Path) -> None:
    rng = random.Random(6)
    names = list(TOPICS)

    def rows(count: int) -> list[dict[str, Any]]:
        out = []
        for i in range(count):  # label: do the two texts share a topic
            a = rng.choice(names)
            b = rng.choice([n for n in names if n != a]) if i % 2 else a
            out.append({"text_a": sentence(rng, TOPICS[a], 5), "text_b": sentence(rng, TOPICS[b], 5), "label": a == b})
        return out

    for split, count in (("train", 40), ("valid", 20), ("test", 20)):
        write_jsonl(tmp_path / "pairs" / f"{split}.jsonl", rows(count))
    task = load_task(str(tmp_path / "pairs"), TaskFields())
    assert (task.fields.text, task.fields.pair) == ("text_a", "text_b") and task.classes == [0, 1]
    prepared = PreparedTask.build(task, load_tokenizer(untrained_folder), ProbeSettings())
    assert all(1 in types for types in prepared.train.token_type_ids)  # the second text is segment 1
    result, _ = run_probe(untrained_folder, tmp_path / "pairs", baseline=False, mode="linear")
    assert 0 <= result.scores["accuracy"] <= 1


def test_special_tokens_written_in_a_tasks_text_are_text(untrained_folder: Path, tmp_path: Path) -> None:
    """[MASK], [SEP], [PAD] and [CLS] written in a pair task's texts encode as their characters, as in the
    pretraining corpus: each example holds the one [CLS] and two [SEP] the tokenizer adds, no [MASK] or [PAD]."""
    literals = ("[MASK]", "[SEP]", "[PAD]", "[CLS]")
    for split in ("train", "test"):
        rows = [{"text_a": f"apple {literals[i % 4]} pear", "text_b": f"{literals[i % 3]} rain", "label": i % 2}
                for i in range(8)]  # fmt: skip
        write_jsonl(tmp_path / "task" / f"{split}.jsonl", rows)
    tokenizer = load_tokenizer(untrained_folder)
    prepared = PreparedTask.build(load_task(str(tmp_path / "task"), TaskFields()), tokenizer, ProbeSettings())
    for ids in prepared.train.input_ids + prepared.test.input_ids:
        counts = [ids.count(getattr(tokenizer, f"{role}_token_id")) for role in ("cls", "sep", "mask", "pad")]
        assert counts == [1, 2, 0, 0], tokenizer.convert_ids_to_tokens(ids)


def test_csv_and_parquet_files_and_explicit_sources(untrained_folder: Path, topics: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (topics / "task" / "train.jsonl").read_text().splitlines()]
    with open(tmp_path / "train.csv", "w", encoding="utf-8") as handle:
        handle.write("label,text\n" + "".join(f"{r['label']},{r['text']}\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test.parquet")
    task = load_task(None, TaskFields(), train=str(tmp_path / "train.csv"), test=str(tmp_path / "test.parquet"))
    assert len(task.train) == 54 and len(task.valid) == 6 and len(task.test) == 60  # 10 % of train held out
    assert task.classes == ["fruit", "tools", "weather"]


def test_scores_match_their_definitions() -> None:
    gold = torch.tensor([0, 0, 1, 1, 2, 2])
    predicted = torch.tensor([0, 1, 1, 1, 2, 0])
    scores = classification_scores(predicted, gold, majority=0)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    # per class F1: 0 -> 2*1/(2+1+1) = .5, 1 -> 2*2/(4+1+0) = .8, 2 -> 2*1/(2+0+1) = 2/3
    assert scores["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert scores["majority_accuracy"] == pytest.approx(2 / 6)
    regression = regression_scores(torch.tensor([1.0, 2.0, 3.0, 5.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert regression["pearson"] == pytest.approx(0.9)
    assert regression["spearman"] == pytest.approx(0.9)  # the same ranks: rho equals r here
    assert regression["ci95"][0] < 0.9 < regression["ci95"][1]


# ---------------------------------------------------------------------------------------------
# Live during pretraining


def test_live_probe_writes_metrics_lines_and_survives_resume(topics: Path, tmp_path: Path) -> None:
    task = str(topics / "task")
    options = {
        "train.run_dir": str(tmp_path / "run"),
        "train.max_steps": 8,
        "train.eval_every": 4,
        "train.pause_after": 4,
        "checkpoint.save_every": 4,
        "probe.task": task,
        "probe.max_train_examples": 30,
    }
    pretrain(load_config(None, topic_overrides(topics, **options)))
    pretrain(load_config(None, topic_overrides(topics, **options)), resume="auto")
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    probes = [line for line in lines if "probe_acc" in line]
    assert [line["step"] for line in probes] == [4, 8]
    for line in probes:
        assert 0 <= line["probe_acc"] <= 1 and 0 <= line["probe_f1"] <= 1 and line["probe_seconds"] >= 0


def test_live_probe_leaves_the_run_as_without_it_and_its_time_off_the_clock(topics: Path, tmp_path: Path) -> None:
    """Probing forks the random state and restores the model's mode: the losses equal those of a run without it.
    And the budget's clock stops while it probes: elapsed_s grows by about one step across a probe."""
    runs = []
    # 20 epochs: a probe many steps long, so a step's own time (which load stretches) stays far below half of it
    probe = {"probe.task": str(topics / "task"), "probe.mode": "finetune", "probe.epochs": 20}
    for name, extra in (("plain", {}), ("probed", probe)):
        options = {"train.run_dir": str(tmp_path / name), "train.max_steps": 6, "train.eval_every": 2, **extra}
        pretrain(load_config(None, topic_overrides(topics, **options)))
        runs.append([json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()])
    plain, probed = ([line["loss"] for line in run if "loss" in line] for run in runs)
    assert plain == probed
    elapsed = {line["step"]: line["elapsed_s"] for line in runs[1] if "loss" in line}
    probe_seconds = {line["step"]: line["probe_seconds"] for line in runs[1] if "probe_acc" in line}
    assert sorted(probe_seconds) == [2, 4, 6]
    assert elapsed[3] - elapsed[2] < probe_seconds[2] / 2, (elapsed, probe_seconds)


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing written


def task_folder(root: Path, train: list[dict], valid: list[dict], test: list[dict]) -> Path:
    for split, rows in (("train", train), ("valid", valid), ("test", test)):
        write_jsonl(root / "t" / f"{split}.jsonl", rows)
    return root / "t"


TWO = [{"text": "apple pear", "label": "fruit"}, {"text": "saw rake", "label": "tools"}]


def _no_label_field(root: Path) -> tuple[list[str], list[str]]:
    rows = [{"text": "apple pear", "topic": "fruit"}] * 4
    return ["--task", str(task_folder(root, rows, rows, rows))], ["no field 'label'", "topic", "--label-field"]


def _one_class_only(root: Path) -> tuple[list[str], list[str]]:
    rows = [{"text": "apple pear", "label": "fruit"}] * 4
    return ["--task", str(task_folder(root, rows, rows, rows))], ["one class only", "'fruit'"]


def _unseen_test_label(root: Path) -> tuple[list[str], list[str]]:
    folder = task_folder(root, TWO * 2, TWO, TWO + [{"text": "rain", "label": "weather"}])
    return ["--task", str(folder)], ["test split", "'weather'", "never shows"]


def _empty_split(root: Path) -> tuple[list[str], list[str]]:
    folder = task_folder(root, TWO, TWO, [])
    return ["--task", str(folder)], ["test split", "holds no examples"]


def _missing_text_field(root: Path) -> tuple[list[str], list[str]]:
    rows = [{"sentence": "apple", "label": "fruit"}, {"sentence": "saw", "label": "tools"}]
    return ["--task", str(task_folder(root, rows, rows, rows))], ["no field 'text'", "sentence", "--text-field"]


def _csv_row_with_more_fields_than_its_header(root: Path) -> tuple[list[str], list[str]]:
    folder = task_folder(root, TWO, TWO, TWO)
    (folder / "train.jsonl").unlink()
    (folder / "train.csv").write_text("text,label\napple pear,fruit\nsaw, rake,tools\n", encoding="utf-8")
    return ["--task", str(folder)], [f"{folder / 'train.csv'}:3", "more fields than the header", "quote"]


def _one_train_example_and_no_valid(root: Path) -> tuple[list[str], list[str]]:
    folder = task_folder(root, TWO[:1], TWO, TWO)
    (folder / "valid.jsonl").unlink()
    return ["--task", str(folder)], ["1 example", "too few to hold out a validation split", "add a valid file"]


def _unknown_mode(root: Path) -> tuple[list[str], list[str]]:
    return ["--task", str(root), "--mode", "probe"], ["--mode must be finetune or linear", "'probe'"]


def _seed_beyond_64_bits(root: Path) -> tuple[list[str], list[str]]:
    return ["--task", str(root), "--seed", str(2**64)], ["--seed must lie in [0, ", str(2**64)]


def _missing_task(root: Path) -> tuple[list[str], list[str]]:
    return ["--task", str(root / "nowhere")], ["does not exist"]


BAD_TASKS = [
    _no_label_field,
    _one_class_only,
    _unseen_test_label,
    _empty_split,
    _missing_text_field,
    _csv_row_with_more_fields_than_its_header,
    _one_train_example_and_no_valid,
    _unknown_mode,
    _seed_beyond_64_bits,
]


@pytest.mark.parametrize("make", BAD_TASKS + [_missing_task], ids=lambda f: f.__name__.strip("_"))
def test_bad_task_or_argument_is_one_line_and_exit_2(
    make, untrained_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args, needles = make(tmp_path)
    saved = tmp_path / "kept"
    code, lines = run_cli(capsys, "probe", "--model", str(untrained_folder), *args, "--save", str(saved))
    assert code == 2
    assert_one_error_line(lines, *needles)
    assert not saved.exists() and not list(tmp_path.glob(".kept.tmp-*"))


def test_fine_tuning_that_diverges_is_one_line_not_a_score(
    untrained_folder: Path, topics: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A fine-tuning whose loss or gradients turn non-finite used to go on with NaN weights and report the share of
    class 0 as the accuracy (seen on a GPU); now it stops with one line that names the step and the learning rate."""
    saved = tmp_path / "kept"
    args = ["--model", str(untrained_folder), "--task", str(topics / "task"), "--device", "cpu"]
    code, lines = run_cli(capsys, "probe", *args, "--lr", "1e30", "--save", str(saved))
    assert code == 2
    assert_one_error_line(lines, "fine-tuning diverged at step", "try a lower --lr than 1e+30")
    assert not saved.exists() and not list(tmp_path.glob(".kept.tmp-*"))


def test_a_live_probe_that_diverges_is_skipped_and_pretraining_goes_on(
    topics: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    options = {"train.run_dir": str(run_dir), "train.max_steps": 4, "train.eval_every": 2}
    probe = {"probe.task": str(topics / "task"), "probe.mode": "finetune", "probe.lr": 1e30}
    probe |= {"probe.max_train_examples": 30, "probe.batch_size": 8}
    pretrain(load_config(None, topic_overrides(topics, **options, **probe)))
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert not [line for line in lines if "probe_acc" in line]
    assert max(line["step"] for line in lines if "loss" in line) == 4
    assert capsys.readouterr().err.count("probe skipped: fine-tuning diverged at step") == 2  # steps 2 and 4


def test_a_model_folder_that_is_not_an_encoder(
    untrained_folder: Path, topics: Path, copy_of, capsys: pytest.CaptureFixture
) -> None:
    folder = copy_of(untrained_folder, "decoder")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**config, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    )
    code, lines = run_cli(capsys, "probe", "--model", str(folder), "--task", str(topics / "task"))
    assert code == 2
    assert_one_error_line(lines, "'gpt2'", "not a BERT-family encoder")


def test_a_bad_live_probe_task_stops_pretrain_before_anything_is_written(topics: Path, tmp_path: Path) -> None:
    args, _ = _one_class_only(tmp_path)
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "mlmtrain", "pretrain"]
    options = {"train.run_dir": str(run_dir), "train.eval_every": 5, "probe.task": args[1]}
    for option in topic_overrides(topics, **options):
        command += ["--set", option]
    done = subprocess.run(command, env=CHILD_ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert_one_error_line(done.stderr.strip().splitlines(), "one class only")
    assert not run_dir.exists()
