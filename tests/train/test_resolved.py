"""A run is resolved once (train/resolved.py): a resume reads each file of the checkpoint it resumes from at most
twice, and the resolution works on a copy, so the caller's config never changes under it."""

from __future__ import annotations

import collections
import copy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlmtrain.config import load_config
from mlmtrain.train.loop import pretrain

from ..helpers import FINISHED, tiny_overrides
from .test_init_from import continue_options

_OPENED: list[collections.Counter] = []  # while a count is on, the names of the files opened in its folder


def _count_opens(event: str, args: tuple) -> None:
    if _OPENED and event == "open" and isinstance(args[0], (str, Path)):
        path = Path(args[0])
        if path.parent == _OPENED[-1]["folder"]:
            _OPENED[-1][path.name] += 1


sys.addaudithook(_count_opens)  # an audit hook stays for the process: it counts only inside `opened`


@contextmanager
def opened(folder: Path) -> Iterator[collections.Counter]:
    """The files of `folder` opened inside the block (by Python: the Rust tokenizer's and safetensors' own reads are
    not seen), by name."""
    counts = collections.Counter({"folder": folder})
    _OPENED.append(counts)
    try:
        yield counts
    finally:
        _OPENED.pop()
        del counts["folder"]


def test_a_resume_reads_each_file_of_its_checkpoint_at_most_twice(finished_run: Path, tiny_data: Path) -> None:
    checkpoint = (finished_run / "checkpoints" / "step-4").resolve()
    cfg = load_config(
        None, tiny_overrides(tiny_data, **{**FINISHED, "train.max_steps": 6, "train.run_dir": str(finished_run)})
    )
    with opened(checkpoint) as counts:
        pretrain(cfg, resume=str(checkpoint))
    assert {"config.json", "mlmtrain.yaml", "training_state.pt"} <= set(counts)  # what a resume reads, it counts
    assert max(counts.values()) <= 2, counts


def test_the_callers_config_is_never_changed(tiny_data: Path, tmp_path: Path) -> None:
    """A continued base fills the model's shape and the tokenizer, and data.document_attention auto is decided: on
    the copy the run keeps, never on the caller's Config."""
    from .test_init_from import write_base

    base = write_base(tmp_path / "base")
    cfg = load_config(
        None, continue_options(tiny_data, base, tmp_path, **{"train.max_steps": 1, "data.document_attention": "auto"})
    )
    before = copy.deepcopy(cfg)
    pretrain(cfg)
    assert cfg == before
    # the run's copy took the base's tokenizer and decided auto: the caller's says what it said
    assert cfg.tokenizer.pretrained is None and cfg.data.document_attention == "auto"
    assert "pretrained: " + str(base) in (tmp_path / "run" / "mlmtrain.yaml").read_text()
