"""How far a masked-LM folder is from the README's cloze goal: for each of the README's cloze sentences, the right
word's rank and probability among the model's predictions for [MASK], and how many land in the top k.

    python scripts/cloze.py runs/quickstart/checkpoints/latest              # the quick start's model
    python scripts/cloze.py RUN_A/checkpoints/latest RUN_B/checkpoints/latest --top-k 3

`mlmtrain fill-mask --top-k 3` shows whether a word made the top 3; a rank says by how much it missed, which is what
compares two recipes whose models both miss (a word at rank 4 is nearly there, one at rank 300 is not). The ranks
come from the same softmax the fill-mask pipeline ranks, so rank <= k is exactly "in fill-mask's top k". An ELECTRA
checkpoint is scored through its generator, as fill-mask does.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))  # mlmtrain from this checkout, installed or not

from mlmtrain.errors import UserError  # noqa: E402
from mlmtrain.evaluate.perplexity import load_masked_lm  # noqa: E402
from mlmtrain.tools.masked_lm import masked_lm_folder  # noqa: E402

# a row of the README's table: | sentence with [MASK] | answer |
_ROW = re.compile(r"^\| (.*\[MASK\].*) \| (\w+) \|$", flags=re.MULTILINE)


def readme_cloze(readme: Path) -> list[tuple[str, str]]:
    """(sentence, answer) for every row of the README's cloze table."""
    return _ROW.findall(readme.read_text(encoding="utf-8"))


@dataclass
class Answer:
    sentence: str
    answer: str
    rank: int  # 1 = the model's first choice; 0 when the answer is not one token of the model's vocabulary
    probability: float
    top: list[str]  # the model's first choices, best first


def score(folder: Path, cloze: list[tuple[str, str]], top_k: int) -> list[Answer]:
    """Each sentence's answer ranked among the model's predictions for its one [MASK]."""
    model, tokenizer = load_masked_lm(masked_lm_folder(folder))  # in eval mode
    answers = []
    for sentence, answer in cloze:
        encoded = tokenizer(sentence.replace("[MASK]", tokenizer.mask_token), return_tensors="pt")
        (position,) = (encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0]
        with torch.no_grad():
            probabilities = model(**encoded).logits[0, position].float().softmax(-1)
        top = [tokenizer.decode([i]).strip() for i in probabilities.topk(top_k).indices.tolist()]
        ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:  # split into pieces (or unknown): a single [MASK] cannot hold it
            answers.append(Answer(sentence, answer, 0, 0.0, top))
            continue
        p = probabilities[ids[0]]
        answers.append(Answer(sentence, answer, int((probabilities > p).sum()) + 1, float(p), top))
    return answers


def report(folder: Path, answers: list[Answer], top_k: int) -> str:
    lines = [str(folder)]
    for a in answers:
        rank = f"{a.rank:>5}" if a.rank else "    -"
        lines.append(f"{rank}  {a.probability:.4f}  {a.answer:<10} {' '.join(a.top):<32} {a.sentence}")
    hits = sum(1 <= a.rank <= top_k for a in answers)
    # smoother than the hits for comparing recipes: how much probability the model puts on the right words
    ranked = [math.log(a.probability) for a in answers if a.rank]
    mean = f"{sum(ranked) / len(ranked):.2f}" if ranked else "n/a"
    lines.append(f"in the top {top_k}: {hits} of {len(answers)}; mean log-probability of the answers: {mean}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="masked-LM folders (checkpoints)")
    parser.add_argument("--top-k", type=int, default=3, help="a hit is a rank of at most this (the goal uses 3)")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md", help="where the cloze table is")
    a = parser.parse_args(argv)
    if a.top_k < 1:
        parser.error(f"--top-k must be >= 1 (got {a.top_k})")
    try:
        cloze = readme_cloze(a.readme)
    except OSError as error:
        parser.error(f"--readme {a.readme} cannot be read ({error.strerror}); pass the README that holds the table")
    if not cloze:
        parser.error(f"--readme {a.readme} has no cloze table ('| sentence with [MASK] | answer |' rows)")
    for number, folder in enumerate(a.models):
        try:
            answers = score(folder, cloze, a.top_k)
        except UserError as error:
            print(f"cloze: {error}", file=sys.stderr)
            return 2
        print(("\n" if number else "") + report(folder, answers, a.top_k), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
