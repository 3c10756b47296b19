"""What a pretrain run starts from, resolved once before any work (`resolve_run`): a copy of the config with the
models it names filled in, those models read once, the checkpoint --resume or --branch-from names read once (what
wrote it: objective, family, tokenizer, shape), and, where it exists before tokenizing, the run's tokenizer with the
one `Objective` built on it. Every refusal a start can meet is made here, before a file is written; the checks, the
setup, the store plan and the announcement read this `ResolvedRun`, not the files again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from mlmtrain.config import Config
from mlmtrain.data.masking import VocabInfo, check_whole_words
from mlmtrain.data.sources import corpus_splits
from mlmtrain.data.store import check_outputs_apart, tokenizer_plan
from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_fingerprint
from mlmtrain.errors import UserError
from mlmtrain.runtime.model_folder import ModelFolder
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train.base_model import KEY, Base
from mlmtrain.train.branch import check_branch
from mlmtrain.train.checkpoint import SavedCheckpoint
from mlmtrain.train.init_from import resolve_init_from
from mlmtrain.train.objectives import Objective, objective_of
from mlmtrain.train.ownership import check_replaceable_after
from mlmtrain.train.resume_checks import (
    check_model_shape,
    check_objective,
    check_phase,
    check_tokenizer,
    setting_changes,
)

_TOKENIZER_MAKERS = ("tokenizer.", "model.init_from", "data.")  # settings that decide an extended tokenizer


@dataclass(frozen=True)
class ResolvedRun:
    """A run's starting points, each resolved once."""

    cfg: Config  # a copy of the caller's, resolved: the named models' shape and tokenizer filled in
    resume: Optional[str]  # --resume as given (auto or a folder); None: a fresh run
    start: Optional[SavedCheckpoint]  # the checkpoint it starts from; None: fresh, or auto in a folder with none yet
    bases: dict[str, Base]  # the models the config names (model.init_from, distill.teacher), read once, by key
    tokenizer: Any = None  # the run's tokenizer where it is known before tokenizing (a resume's, a branch's)
    objective: Optional[Objective] = None  # built on that tokenizer
    branched: bool = False  # `start` is another run's checkpoint (--branch-from): this run starts from it
    notes: tuple[str, ...] = ()  # what the start says of itself (printed once the run begins)

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.train.run_dir)

    @property
    def resume_from(self) -> Optional[Path]:
        return self.start.folder if self.start is not None else None

    @property
    def resumed_base(self) -> Optional[Path]:
        """The checkpoint that stands in for model.init_from's base and its tokenizer (its run's own checkpoint)."""
        base = self.bases.get(KEY)
        return base.folder if base is not None and self.start is not None and base.folder == self.start.folder else None

    @property
    def continued(self) -> Optional[Union[ModelFolder, Base]]:
        """The model the run continues: the checkpoint it starts from, else the base (None: a model from scratch)."""
        return self.start.saved if self.start is not None else self.bases.get(KEY)

    def objective_with(self, tokenizer: Any) -> Objective:
        """The run's one objective: built at resolution where the tokenizer was known, else now on `tokenizer`."""
        return self.objective or objective_of(self.cfg, VocabInfo.from_tokenizer(tokenizer), self.bases)


def resolve_run(cfg: Config, resume: Optional[str], branch_from: Optional[str] = None) -> ResolvedRun:
    """Resolve --resume (or --branch-from) and the models the config names once, on a copy of `cfg`; a mistyped folder,
    an unfinished checkpoint, a checkpoint of another objective, shape or tokenizer, or an unusable base is refused
    here, before anything is written. A resumed run of a base reads its checkpoint, not the base (which may be gone)."""
    branch = check_branch(cfg, branch_from, resume) if branch_from is not None else None
    folder = ckpt.resolve_resume(Path(cfg.train.run_dir), resume) if resume is not None else branch
    start = ckpt.read_checkpoint(folder) if folder is not None else None
    stands_in = start is not None and start.stands_in_for(KEY, cfg.model.init_from)
    resolved = resolve_init_from(cfg, resumed=start.saved if stands_in else None)
    cfg, bases = resolved.cfg, resolved.bases
    check_outputs_apart(cfg)  # the run, tokenizer and store folders apart from every input
    corpus = corpus_splits(cfg.data)[0]  # a data.train that does not exist is refused here
    if start is None:
        return ResolvedRun(cfg, resume, None, bases)
    check_objective(start, cfg, branched=branch is not None)
    check_phase(start, cfg, branched=branch is not None)
    if branch is None:
        check_replaceable_after(Path(cfg.train.run_dir), start.folder)
    tokenizer = _start_tokenizer(cfg, corpus, start, branched=branch is not None, stands_in=stands_in)
    check_tokenizer(start, cfg, tokenizer_fingerprint(tokenizer))
    if cfg.masking.whole_word:
        check_whole_words(tokenizer, str(cfg.tokenizer_dir))
    objective = objective_of(cfg, VocabInfo.from_tokenizer(tokenizer), bases)
    check_model_shape(start, cfg, objective, branched=branch is not None)
    note = objective.check_start(start, branched=branch is not None)  # what the checkpoint's record holds it to
    notes = (note,) if note else ()
    return ResolvedRun(cfg, resume, start, bases, tokenizer, objective, branch is not None, notes)


def _start_tokenizer(cfg: Config, corpus: Any, start: SavedCheckpoint, branched: bool, stands_in: bool) -> Any:
    """The tokenizer a run that starts from `start` will have, loaded once: the run's tokenizer folder when it is
    current, else the copy tokenize would make (of tokenizer.pretrained, or of the checkpoint standing in for the base
    or branched from). WordPiece training is not bit-reproducible, so a resume that would train or extend a tokenizer
    anew is refused now, while the run's tokenizer and store are intact; a branch takes the checkpoint's instead."""
    action, _ = tokenizer_plan(cfg, corpus)
    if action == "reuse":
        return load_tokenizer(cfg.tokenizer_dir)
    if action == "copy":
        return load_tokenizer(start.folder if stands_in else cfg.tokenizer.pretrained)
    if branched:  # the new run would train or extend one: it takes the checkpoint's (branch.py)
        return load_tokenizer(start.folder)
    if cfg.model.init_from:  # the base's tokenizer would be extended anew: the run's own settings make it
        changed = [c for c in setting_changes(start.saved, cfg) if c.startswith(_TOKENIZER_MAKERS)]
        raise UserError(
            "checkpoint",
            f"resuming {start.folder} needs the tokenizer it was trained with, and these settings would extend the "
            f"base's tokenizer anew ({'; '.join(changed) or 'the tokenizer folder is missing'}); resume with that "
            f"run's settings: --config {Path(cfg.train.run_dir) / 'mlmtrain.yaml'}",
        )
    raise UserError(
        "checkpoint",
        f"resuming {start.folder} needs the tokenizer it was trained with, and {cfg.tokenizer_dir} "
        "(tokenizer.path) would be trained anew (it is missing, or the corpus or tokenizer settings changed); "
        f"resume with that run's tokenizer: --set tokenizer.pretrained={start.folder}",
    )
