"""Build a labeled task from a folder of books: which book is this paragraph from?

The input is a corpus folder as `gutenberg-books` lays it out: `<split>.txt` with one paragraph a line and a
`manifest.tsv` giving each book's title and its 1-based line range inside its split file. The task takes the books
of one split (by default `test`, whose authors the corpus keeps out of its train split, so a model adapted on
train.txt has never read them), keeps each book's paragraphs of at least --min-words words, drops every paragraph
whose text occurs twice (within a book or across books), and deals each book's paragraphs at random (--seed) into
train, valid and test: no paragraph is in two splits, every book has the same number in each split.

    python scripts/make_book_task.py --corpus ../corpora/gutenberg-books --out tasks/books-by-title

writes train.jsonl, valid.jsonl and test.jsonl (`{"text": ..., "label": <book title>}`) and a PROVENANCE.md with
the command, counts and the majority baseline. `mlmtrain probe --task DIR` fine-tunes on it.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import random
import shlex
import sys
from pathlib import Path
from typing import Optional

SPLITS = ("train", "valid", "test")


class TaskError(Exception):
    """A bad input: printed as one line, exit 2."""


def read_books(corpus: Path, split: str) -> dict[str, list[str]]:
    """{title: its paragraphs in order} for the books of `split`, from manifest.tsv and <split>.txt."""
    manifest, text = corpus / "manifest.tsv", corpus / f"{split}.txt"
    for path in (manifest, text):
        if not path.is_file():
            raise TaskError(f"{path} is missing; --corpus must hold manifest.tsv and {split}.txt (gutenberg-books)")
    lines = text.read_text(encoding="utf-8").splitlines()
    books: dict[str, list[str]] = {}
    with open(manifest, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    needed = {"split", "title", "first_line", "last_line"}
    if not rows or not needed <= set(rows[0]):
        raise TaskError(f"{manifest} lacks the columns {', '.join(sorted(needed))}")
    for row in rows:
        if row["split"] != split:
            continue
        first, last = int(row["first_line"]), int(row["last_line"])
        if not 1 <= first <= last <= len(lines):
            raise TaskError(f"{manifest}: {row['title']!r} has lines {first}-{last}, beyond {text} ({len(lines)})")
        title = " ".join(row["title"].split()).rstrip(",")
        books.setdefault(title, []).extend(lines[first - 1 : last])  # two volumes of one title: one label
    if not books:
        raise TaskError(f"{manifest} lists no book of split {split!r}")
    return books


def deal(
    books: dict[str, list[str]], sizes: dict[str, int], min_words: int, seed: int
) -> tuple[dict[str, list[dict[str, str]]], list[str]]:
    """The task's splits and the titles left out (too few usable paragraphs for the sizes asked)."""
    counts = collections.Counter(p for paragraphs in books.values() for p in paragraphs)  # across and within books
    need = sum(sizes.values())
    splits: dict[str, list[dict[str, str]]] = {name: [] for name in SPLITS}
    left_out = []
    rng = random.Random(seed)
    for title in sorted(books):
        usable = sorted({p for p in books[title] if len(p.split()) >= min_words and counts[p] == 1})
        if len(usable) < need:
            left_out.append(title)
            continue
        rng.shuffle(usable)
        start = 0
        for name in SPLITS:
            splits[name] += [{"text": p, "label": title} for p in usable[start : start + sizes[name]]]
            start += sizes[name]
    for rows in splits.values():
        rng.shuffle(rows)
    return splits, left_out


def write_task(out: Path, splits: dict[str, list[dict[str, str]]], left_out: list[str], command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    labels = sorted({row["label"] for row in splits["train"]})
    majority = max(collections.Counter(r["label"] for r in splits["test"]).values()) / len(splits["test"])
    lines = [
        f"# {out.name}: which book is this paragraph from?",
        "",
        f"Built by `{command}`.",
        "",
        "| file | rows |",
        "|---|---|",
        *[f"| {name}.jsonl | {len(rows):,} |" for name, rows in splits.items()],
        "",
        f"{len(labels)} classes (books), the same number of paragraphs of each in every split; no paragraph text "
        f"occurs in two splits (repeated paragraphs are dropped). Majority baseline on test: {majority:.1%}.",
        "",
        "Books: " + "; ".join(labels) + ".",
    ]
    if left_out:
        lines += ["", "Left out (too few usable paragraphs): " + "; ".join(left_out) + "."]
    (out / "PROVENANCE.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="a folder with manifest.tsv and <split>.txt")
    parser.add_argument("--out", required=True, help="a new (or empty) folder for the task")
    parser.add_argument("--split", default="test", help="the corpus split whose books make the task (default test)")
    parser.add_argument("--train", type=int, default=120, help="train paragraphs per book (default 120)")
    parser.add_argument("--valid", type=int, default=20, help="valid paragraphs per book (default 20)")
    parser.add_argument("--test", type=int, default=40, help="test paragraphs per book (default 40)")
    parser.add_argument("--min-words", type=int, default=20, help="shorter paragraphs are left out (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
            raise TaskError(f"--out {out} exists and is not an empty folder; give a new folder")
        if min(args.train, args.valid, args.test) < 1:
            raise TaskError("--train, --valid and --test must be at least 1")
        books = read_books(Path(args.corpus), args.split)
        sizes = {"train": args.train, "valid": args.valid, "test": args.test}
        splits, left_out = deal(books, sizes, args.min_words, args.seed)
        if len({row["label"] for row in splits["train"]}) < 2:
            raise TaskError(
                f"fewer than 2 books of split {args.split!r} have {sum(sizes.values())} usable paragraphs; "
                "lower --train/--valid/--test or --min-words"
            )
    except TaskError as error:
        print(f"make_book_task: {error}", file=sys.stderr)
        return 2
    command = shlex.join(["python", "scripts/make_book_task.py", *(argv if argv is not None else sys.argv[1:])])
    write_task(out, splits, left_out, command)
    print(f"wrote {out}: " + ", ".join(f"{len(rows)} {name}" for name, rows in splits.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
