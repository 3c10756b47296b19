"""What a pretrain run starts from, resolved once before any work (`resolve_run`): the config with model.init_from's
shape and tokenizer filled in, the checkpoint --resume names, and the folders the base is read from. The checks,
the tokenizer and the loop read this `ResolvedRun`, not the files again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mlmtrain.config import Config
from mlmtrain.data.store import check_outputs_apart
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train.branch import check_branch
from mlmtrain.train.init_from import base_folder, resolve_init_from, resumed_base


@dataclass(frozen=True)
class ResolvedRun:
    """A run's starting points, each resolved once."""

    cfg: Config  # resolved: model.init_from's shape and tokenizer filled in
    resume: Optional[str]  # --resume as given (auto or a folder); None: a fresh run
    resume_from: Optional[Path]  # the complete checkpoint it names; None: fresh, or auto in a folder with none yet
    resumed_base: Optional[Path]  # the checkpoint that stands in for model.init_from's base and tokenizer
    base: Optional[Path]  # where the base's files are read (resumed_base, else the base's folder); None: no base
    branched: bool = False  # resume_from is another run's checkpoint (--branch-from): this run starts from it

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.train.run_dir)

    @property
    def continued(self) -> Optional[Path]:
        """The model the run continues: the resumed checkpoint, else the base (None: a model from scratch)."""
        return self.resume_from if self.resume_from is not None else self.base


def resolve_run(cfg: Config, resume: Optional[str], branch_from: Optional[str] = None) -> ResolvedRun:
    """Resolve --resume (or --branch-from) and model.init_from once, filling `cfg`; a mistyped folder, an unfinished
    checkpoint, a branch of another shape or an unusable base is refused here, before anything is written. A resumed
    run of a base reads its checkpoint, not the base (which may be gone)."""
    branch = check_branch(cfg, branch_from, resume) if branch_from is not None else None
    resume_from = ckpt.resolve_resume(Path(cfg.train.run_dir), resume) if resume is not None else branch
    if resume_from is not None:
        ckpt.check_complete(resume_from)  # a resume reads its files; a resumed base's stand in for the base's
    resumed = resumed_base(cfg, resume_from)
    resolve_init_from(cfg, resumed=resumed)
    check_outputs_apart(cfg)  # no folder the run writes is, holds or lies inside one it reads
    if branch is not None:
        from mlmtrain.train.resume_checks import check_model_shape  # here: resume_checks reads a ResolvedRun

        check_model_shape(branch, cfg)  # a checkpoint of another shape is refused before the new run exists
    base = resumed if resumed is not None or not cfg.model.init_from else base_folder(cfg.model.init_from)
    return ResolvedRun(cfg, resume, resume_from, resumed, base, branched=branch is not None)
