"""`pretrain --branch-from CHECKPOINT`: a new run folder that starts from another run's checkpoint with its whole
training state (weights, optimizer, step, data position, RNG), as a resume would, while the source run is only
read. Here: the refusals made before anything is written, and the tokenizer the new run takes from the checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from mlmtrain.config import Config
from mlmtrain.data.sources import corpus_splits
from mlmtrain.data.store import tokenizer_plan
from mlmtrain.data.tokenizer import TOKENIZER_FILES, TOKENIZER_META, copy_tokenizer, load_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.runtime.files import check_apart, check_replaceable
from mlmtrain.runtime.progress import say
from mlmtrain.train import checkpoint as ckpt


def check_branch(cfg: Config, branch_from: str, resume: Optional[str]) -> Path:
    """The resolved checkpoint folder a new run branches from; UserError for --resume beside it, a folder that is no
    complete checkpoint, or a train.run_dir that is, holds or lies inside the checkpoint's run folder (through links
    too): the branch would write into the run it reads."""
    if resume is not None:
        raise UserError(
            "argument",
            "--branch-from starts a new run from a checkpoint and --resume continues the run in train.run_dir; "
            "pass one of them",
        )
    if not branch_from.strip():
        raise UserError("argument", "--branch-from names nothing; pass a checkpoint folder RUN_DIR/checkpoints/step-N")
    folder = Path(branch_from)
    if not folder.is_dir():
        raise UserError(
            "checkpoint",
            f"--branch-from {branch_from}: no such folder; pass a checkpoint folder RUN_DIR/checkpoints/step-N",
        )
    if not (folder / ckpt.COMPLETE).exists():
        raise UserError(
            "checkpoint",
            f"--branch-from {branch_from} is not a complete checkpoint (no {ckpt.COMPLETE} marker); pass a folder "
            "RUN_DIR/checkpoints/step-N whose save finished",
        )
    ckpt.check_complete(folder)  # the files a branch reads, as a resume reads them
    source = folder.resolve()
    run = source.parent.parent if source.parent.name == "checkpoints" else source  # RUN of RUN/checkpoints/step-N
    check_apart(
        Path(cfg.train.run_dir),
        "train.run_dir",
        [("the run", run)],
        f"a branch never writes into the run it starts from (--branch-from {branch_from}): set a new folder outside "
        "it with --set train.run_dir=NEW (or --resume to continue that run)",
    )
    return source


def take_branch_tokenizer(cfg: Config, branch: Path) -> None:
    """Where the new run would train (or extend) a tokenizer of its own, write the checkpoint's there instead, under
    the record that makes `tokenize` reuse it: the weights were trained with that tokenizer, and WordPiece training
    is not reproducible. A tokenizer folder that is not mlmtrain's is refused, as training one there would be."""
    action, record = tokenizer_plan(cfg, corpus_splits(cfg.data)[0])
    if action not in ("train", "extend"):
        return  # tokenizer.pretrained or a current tokenizer.path: the resume checks compare it with the checkpoint's
    check_replaceable(cfg.tokenizer_dir, TOKENIZER_META, TOKENIZER_FILES, "tokenizer", "tokenizer.path")
    copy_tokenizer(load_tokenizer(branch), cfg.tokenizer_dir, record)
    say(f"tokenizer: copied {branch}'s to {cfg.tokenizer_dir}")
