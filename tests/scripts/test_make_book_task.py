"""scripts/make_book_task.py: the paragraph -> book task from a corpus laid out as gutenberg-books (manifest.tsv and
<split>.txt), on a small synthetic corpus whose every paragraph names its book, so a label can be checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlmtrain.evaluate.tasks import TaskFields, load_task

from ..helpers import script_module

BOOKS = {"Alpha": 30, "Beta": 28, "Gamma": 6}  # paragraphs per book of split test; Gamma is too short for the sizes
FILLER = " ".join(["and", "then", "the", "story", "went", "on"] * 4)
MANIFEST = "split\tebook_id\ttitle\tauthor\tgroup\tsource_file\tfirst_line\tlast_line\tbytes\twords\n"


@pytest.fixture(scope="module")
def books():
    with script_module("make_book_task.py", "make_book_task") as module:
        yield module


def _corpus(folder: Path) -> Path:
    """Split test holds three books; each has a short heading line and one paragraph repeated in another book."""
    folder.mkdir(parents=True)
    lines, rows = [], [MANIFEST]
    for title, count in BOOKS.items():
        first = len(lines) + 1
        lines.append(f"CHAPTER {title}")  # a heading: fewer than --min-words words
        lines += [f"Book {title} paragraph {i} {FILLER}" for i in range(count)]
        lines.append(f"A shared paragraph {FILLER}")  # in every book: ambiguous, so dropped
        rows.append(f"test\t1\t{title}\tAn Author\tauthor\tf.txt\t{first}\t{len(lines)}\t0\t0\n")
    rows.append("train\t2\tOther\tSomeone\tsomeone\tg.txt\t1\t1\t0\t0\n")
    (folder / "test.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "train.txt").write_text(f"Book Other paragraph 0 {FILLER}\n", encoding="utf-8")
    (folder / "manifest.tsv").write_text("".join(rows), encoding="utf-8")
    return folder


def _rows(folder: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (folder / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]


def test_each_book_is_dealt_into_disjoint_splits_with_equal_counts_and_true_labels(tmp_path, books):
    corpus = _corpus(tmp_path / "corpus")
    out = tmp_path / "task"
    assert books.main(["--corpus", str(corpus), "--out", str(out), "--train", "12", "--valid", "4", "--test", "8"]) == 0
    splits = {name: _rows(out, name) for name in ("train", "valid", "test")}
    texts = [{row["text"] for row in rows} for rows in splits.values()]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])  # no paragraph in two splits
    for name, size in (("train", 12), ("valid", 4), ("test", 8)):
        assert sorted(row["label"] for row in splits[name]) == ["Alpha"] * size + ["Beta"] * size
    for rows in splits.values():
        for row in rows:
            assert row["text"].startswith(f"Book {row['label']} paragraph ")  # the label is the paragraph's book
    assert "Gamma" in (out / "PROVENANCE.md").read_text(encoding="utf-8")  # left out, and said so
    loaded = load_task(str(out), TaskFields())
    assert len(loaded.train) == 24 and len(loaded.test) == 16
    again = tmp_path / "again"
    books.main(["--corpus", str(corpus), "--out", str(again), "--train", "12", "--valid", "4", "--test", "8"])
    assert _rows(again, "test") == splits["test"]  # a pure function of the corpus and --seed
    other = tmp_path / "other"
    books.main(
        ["--corpus", str(corpus), "--out", str(other), "--train", "12", "--valid", "4", "--test", "8", "--seed", "1"]
    )
    assert _rows(other, "test") != splits["test"]


def test_bad_inputs_are_one_line_and_write_nothing(tmp_path, books, capsys):
    corpus = _corpus(tmp_path / "corpus")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep\n")
    assert books.main(["--corpus", str(corpus), "--out", str(taken)]) == 2
    assert "not an empty folder" in capsys.readouterr().err and sorted(p.name for p in taken.iterdir()) == ["mine.txt"]
    assert books.main(["--corpus", str(tmp_path / "nowhere"), "--out", str(tmp_path / "a")]) == 2
    assert "manifest.tsv" in capsys.readouterr().err and not (tmp_path / "a").exists()
    assert books.main(["--corpus", str(corpus), "--out", str(tmp_path / "b"), "--train", "100"]) == 2
    err = capsys.readouterr().err
    assert "fewer than 2 books" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "b").exists()
