"""Build a sentence-pair task ("same article?", the NSP-like one) from a corpus of one article a line.

    python scripts/make_pair_task.py --corpus corpora/wikipedia-vital-summaries --out tasks/wikipedia-vital-pairs

Each article of at least --min-sentences sentences and --min-words words is cut at the sentence boundary nearest to
its middle (by words) into A and B. Half of a split's examples (a seeded shuffle) keep their own B: label `same`; the
other half get the B of another article of the same split, each such B used exactly once (a seeded derangement
within that half), so no B repeats and its frequency tells nothing: label `other`. A split is the corpus's own file
(train/valid/test.txt -> train/valid/test.jsonl), so no article is in two splits. Records: {"text": A, "pair": B,
"label": "same"|"other"}; the majority baseline is 50 % (the halves differ by at most one). Sentence ends are found
by punctuation (. ! ? then space and a capital, digit or quote), not after an initial or a common abbreviation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shlex
import sys
from pathlib import Path
from typing import Optional

SPLITS = ("train", "valid", "test")
# a sentence ends at . ! or ? (maybe closed by a quote or bracket), then space, then what can open a sentence
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(])")
# words after which a full stop is no sentence end: single initials (J. R. R.) and common abbreviations
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "mt", "jr", "sr", "vs", "c", "ca", "e.g", "i.e", "no", "u.s", "etc"}


class PairTaskError(Exception):
    """A bad input: main prints it as one line and exits 2, having written nothing."""


def sentence_ends(text: str) -> list[int]:
    """Character offsets where a sentence after the first starts."""
    starts = []
    for match in _BOUNDARY.finditer(text):
        before = text[: match.start()].rstrip("\"')]").rsplit(None, 1)[-1].rstrip(".!?").lower()
        if (len(before) == 1 and before.isalpha()) or before in _ABBREVIATIONS:
            continue
        starts.append(match.end())
    return starts


def cut(text: str, min_sentences: int, min_words: int) -> Optional[tuple[str, str]]:
    """(A, B): the article cut at the sentence start nearest to its middle word; None if too short."""
    text = " ".join(text.split())
    starts = sentence_ends(text)
    if len(starts) + 1 < min_sentences or len(text.split()) < min_words:
        return None
    half = len(text.split()) / 2
    start = min(starts, key=lambda offset: abs(len(text[:offset].split()) - half))
    return text[:start].rstrip(), text[start:]


def pair_split(halves: list[tuple[str, str]], rng: random.Random) -> list[dict[str, str]]:
    """Records of one split: a shuffled half keep their own B, the rest each take another article's B, once each."""
    order = list(range(len(halves)))
    rng.shuffle(order)
    same, other = order[: (len(order) + 1) // 2], order[(len(order) + 1) // 2 :]
    b_of = {i: i for i in same}
    if len(other) >= 2:  # shuffled, then rotated by one: a permutation with no article keeping its own B
        donors = other[:]
        rng.shuffle(donors)
        b_of |= {donors[k]: donors[(k + 1) % len(donors)] for k in range(len(donors))}
    else:  # a lone `other` example has no other article in its half to take from: it stays `same`
        b_of |= {i: i for i in other}
    return [
        {"text": halves[i][0], "pair": halves[b_of[i]][1], "label": "same" if b_of[i] == i else "other"}
        for i in sorted(b_of)
    ]


def build(corpus: Path, seed: int, max_train: Optional[int], min_sentences: int, min_words: int) -> dict[str, list]:
    """Every split's records; each split has its own generator (seed, split), so --max-train leaves valid/test as
    they are."""
    records = {}
    for split in SPLITS:
        lines = (corpus / f"{split}.txt").read_text(encoding="utf-8").splitlines()
        halves = [pair for pair in (cut(line, min_sentences, min_words) for line in lines) if pair]
        rng = random.Random(f"{seed}:{split}")
        if split == "train" and max_train and max_train < len(halves):
            halves = [halves[i] for i in sorted(rng.sample(range(len(halves)), max_train))]
        records[split] = pair_split(halves, rng)
    return records


def check(args: argparse.Namespace) -> None:
    missing = [split for split in SPLITS if not (args.corpus / f"{split}.txt").is_file()]
    if missing:
        raise PairTaskError(f"--corpus {args.corpus} has no {missing[0]}.txt: pass a folder with train/valid/test.txt")
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise PairTaskError(f"--out {args.out} exists and is not an empty folder: give a new or empty folder")
    if args.max_train is not None and args.max_train < 1:
        raise PairTaskError(f"--max-train must be >= 1 (got {args.max_train}); leave it out for all articles")
    if args.min_sentences < 2:
        raise PairTaskError(f"--min-sentences must be >= 2 to cut between sentences (got {args.min_sentences})")


def provenance(args: argparse.Namespace, records: dict[str, list], argv: list[str]) -> str:
    """PROVENANCE.md of the task folder: the command, the source files' hashes, the counts and the baseline."""
    rows = []
    for split in SPLITS:
        source = args.corpus / f"{split}.txt"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        same = sum(r["label"] == "same" for r in records[split])
        rows.append(f"| {split}.jsonl | {split}.txt | {len(records[split])} | {same} | {digest} |")
    command = shlex.join(["python", "scripts/make_pair_task.py", *argv])
    return "\n".join(
        [
            f"# {args.out.name}: same article or not (a sentence-pair task)",
            "",
            f"Built by mlmtrain's `scripts/make_pair_task.py` from `{args.corpus}` (its PROVENANCE.md gives the",
            "text's source and licence, which this task keeps), from the repository root:",
            "",
            "```sh",
            command,
            "```",
            "",
            f"Each article (one line of a split's file) with at least {args.min_sentences} sentences and "
            f"{args.min_words} words is cut at the sentence",
            "boundary nearest to its middle word into A (`text`) and B (`pair`). A seeded half of a split keeps its",
            "own B (`same`); each of the other half gets the B of another article of that half, each B used once",
            "(`other`). A split comes from the corpus file of the same name only, so no article is in two splits.",
            "Majority-class accuracy: 50 % (the two labels differ by at most one example per split).",
            "",
            "| file | from | examples | same | source sha256 |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="folder of train/valid/test.txt, one article a line")
    parser.add_argument("--out", type=Path, required=True, help="the task folder to write (new or empty)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the labels and pairings (default 0)")
    parser.add_argument("--max-train", type=int, help="at most this many train examples, a seeded sample (default all)")
    parser.add_argument("--min-sentences", type=int, default=2, help="sentences an article needs (default 2)")
    parser.add_argument("--min-words", type=int, default=40, help="words an article needs (default 40)")
    args = parser.parse_args(argv)
    try:
        check(args)
    except PairTaskError as error:
        print(f"make_pair_task: {error}", file=sys.stderr)
        return 2
    records = build(args.corpus, args.seed, args.max_train, args.min_sentences, args.min_words)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, rows in records.items():
        with open(args.out / f"{split}.jsonl", "w", encoding="utf-8") as out:
            out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (args.out / "PROVENANCE.md").write_text(provenance(args, records, argv), encoding="utf-8")
    counts = ", ".join(f"{len(rows)} {split}" for split, rows in records.items())
    print(f"make_pair_task: {counts} examples -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
