"""The benchmark's targets are stated in one place (`scripts/bench/verdicts.py`'s TARGETS): every doc that gives a
target for one of its figures gives that one, so two docs can never disagree on a target."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench.verdicts import TARGETS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"

# a figure's row in docs/benchmarks/README.md, by the start of its first cell -> (device, target key)
ROWS = {
    "mini tokens/s": ("cpu", "throughput_ratio"),
    "tokens/s, ours / HF recipe": ("cuda", "throughput_ratio"),
    "ours / bare step": ("cuda", "limit_share"),
    "MFU (our `flops_per_token`": ("cuda", "mfu"),
    "time to the tuned HF recipe's best": ("cpu", "tuned_time_ratio"),
}
# a target in methodology.md, by the words before it -> (device, target key)
SENTENCES = {
    r"Target on 2 CPU cores\s+\(mini\): ≥": ("cpu", "throughput_ratio"),
    r"on an H200 \(bf16, base, which masks 15 % as shipped\): ≥": ("cuda", "throughput_ratio"),
    r"what the loop and the data path leave of the limit\. Target ≥": ("cpu", "limit_share"),
    r"tuned: ≤": ("cpu", "tuned_time_ratio"),
}
NUMBER = r"\s*(\d+(?:\.\d+)?)\s*(%?)"


def _value(number: str, percent: str) -> float:
    return float(number) / (100 if percent else 1)


def stated_targets(readme: str, methodology: str) -> list[tuple[str, str, float]]:
    """(where, target key, value) for every target the two docs state for a figure TARGETS holds."""
    found = []
    for line in readme.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        for start, (device, key) in ROWS.items():
            target = re.match(r"[≥≤]" + NUMBER, cells[2])
            if cells[0].startswith(start) and target:
                found.append((f"README.md: {cells[0][:60]}", f"{device}.{key}", _value(*target.groups())))
    for words, (device, key) in SENTENCES.items():
        matches = re.findall(words + NUMBER, methodology)
        assert matches, f"methodology.md no longer says {words!r}: update SENTENCES"
        found += [(f"methodology.md: {words}", f"{device}.{key}", _value(*match)) for match in matches]
    return found


def wrong_targets(stated: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    """The stated targets that are not TARGETS'."""
    return [
        (where, key, value)
        for where, key, value in stated
        if value != pytest.approx(TARGETS[key.split(".")[0]][key.split(".")[1]], abs=1e-3)
    ]


def test_every_target_the_docs_state_is_the_one_the_benchmark_judges() -> None:
    readme, methodology = ((DOCS / name).read_text(encoding="utf-8") for name in ("README.md", "methodology.md"))
    stated = stated_targets(readme, methodology)
    assert {key for _, key, _ in stated} >= {"cpu.throughput_ratio", "cuda.throughput_ratio", "cuda.mfu"}
    assert wrong_targets(stated) == []


def test_a_doc_that_states_another_target_is_caught() -> None:
    readme = "| tokens/s, ours / HF recipe with `--bf16` | 2.14× | ≥ 7× | 2026-11-30 | 7c71fbf | x |\n"
    methodology = (DOCS / "methodology.md").read_text(encoding="utf-8").replace("(mini): ≥ 3.0", "(mini): ≥ 2.5")
    assert wrong_targets(stated_targets(readme, methodology)) == [
        ("README.md: tokens/s, ours / HF recipe with `--bf16`", "cuda.throughput_ratio", 7.0),
        (r"methodology.md: Target on 2 CPU cores\s+\(mini\): ≥", "cpu.throughput_ratio", 2.5),
    ]
