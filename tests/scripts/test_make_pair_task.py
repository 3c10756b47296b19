"""scripts/make_pair_task.py: the same-article pair task from a corpus of one article a line, on a small synthetic
corpus whose every sentence names its article and position, so a pair's source can be read off its text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mlmtrain.evaluate.tasks import TaskFields, load_task

from ..helpers import script_module

SIZES = {"train": 41, "valid": 12, "test": 10}


@pytest.fixture(scope="module")
def pairs():
    """scripts/make_pair_task.py as a module."""
    with script_module("make_pair_task.py", "make_pair_task") as module:
        yield module


def _corpus(folder: Path) -> Path:
    """Articles of 4-6 sentences ("Article train 3 sentence 2 says ..."); every tenth is too short to cut."""
    folder.mkdir(parents=True)
    for split, count in SIZES.items():
        lines = []
        for i in range(count):
            sentences = 1 if i % 10 == 9 else 4 + i % 3
            words = " ".join(["more", "words", "in", "this", "line"] * 2)
            lines.append(" ".join(f"Article {split} {i} sentence {k} says {words}." for k in range(sentences)))
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def _source(text: str) -> set[tuple[str, int]]:
    return {(split, int(i)) for split, i in re.findall(r"Article (\w+) (\d+) sentence", text)}


def _read(folder: Path) -> dict[str, list[dict]]:
    return {split: [json.loads(line) for line in open(folder / f"{split}.jsonl")] for split in SIZES}


def test_pairs_are_cut_at_sentences_labeled_balanced_and_kept_in_their_split(pairs, tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus")
    assert pairs.main(["--corpus", str(corpus), "--out", str(tmp_path / "task"), "--min-words", "20"]) == 0
    records = _read(tmp_path / "task")
    for split, rows in records.items():
        cuttable = sum(1 for i in range(SIZES[split]) if i % 10 != 9)
        assert len(rows) == cuttable  # every long-enough article once, the one-sentence ones left out
        labels = [row["label"] for row in rows]
        assert abs(labels.count("same") - labels.count("other")) <= 1 and labels.count("other") >= 2
        seen_b = []
        for row in rows:
            (a,), (b,) = _source(row["text"]), _source(row["pair"])
            assert a[0] == b[0] == split  # no text from another split
            assert (a == b) == (row["label"] == "same")
            assert row["text"].endswith(".") and row["pair"].startswith("Article ")  # cut between sentences
            if row["label"] == "same":  # B is A's own continuation: together they are the article's line
                line = (corpus / f"{split}.txt").read_text().splitlines()[a[1]]
                assert f"{row['text']} {row['pair']}" == line
                count = line.count("sentence")
                assert abs(row["text"].count("sentence") - count / 2) <= 0.5  # cut near the middle
            seen_b.append(b)
        assert len(set(seen_b)) == len(seen_b)  # each B used once: how often a B appears tells nothing
    task = load_task(str(tmp_path / "task"), TaskFields(pair="pair"))  # the probe reads it as a pair task
    assert task.classes == ["other", "same"] and task.train.pairs is not None
    assert "python scripts/make_pair_task.py --corpus" in (tmp_path / "task" / "PROVENANCE.md").read_text()


def test_a_seed_gives_the_same_task_and_another_seed_another(pairs, tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus")
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = str(tmp_path / name)
        assert pairs.main(["--corpus", str(corpus), "--out", out, "--seed", str(seed), "--min-words", "20"]) == 0
    a, b, c = (_read(tmp_path / name) for name in "abc")
    assert a == b and a != c
    assert pairs.main(["--corpus", str(corpus), "--out", str(tmp_path / "d"), "--max-train", "5"]) == 0
    capped = _read(tmp_path / "d")
    assert len(capped["train"]) == 5 and capped["test"] == _read(tmp_path / "a")["test"]  # valid/test unchanged


def test_a_non_empty_out_folder_or_a_missing_split_is_refused(pairs, tmp_path: Path, capsys) -> None:
    corpus = _corpus(tmp_path / "corpus")
    out = tmp_path / "task"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert pairs.main(["--corpus", str(corpus), "--out", str(out)]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # nothing written
    (corpus / "valid.txt").unlink()
    assert pairs.main(["--corpus", str(corpus), "--out", str(tmp_path / "new")]) == 2
    assert "has no valid.txt" in capsys.readouterr().err and not (tmp_path / "new").exists()
