"""`probe --suite`: the arguments checked, the scorecard's file placed (inside an mlmtrain checkpoint whose files are
all its own, or --out), `evaluate.suite` run on it, and the checkpoint's record and model card brought up to date."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from mlmtrain.config import LARGEST_INT
from mlmtrain.errors import UserError
from mlmtrain.evaluate.suite import SUITES, open_scorecard, protocol, read_suite, run_suite
from mlmtrain.probe_settings import SCORECARD_FILE as SCORECARD
from mlmtrain.probe_settings import ProbeSettings
from mlmtrain.runtime.files import check_apart, check_writable_folder, local_inputs
from mlmtrain.runtime.hub import hub_model_folder
from mlmtrain.runtime.model_folder import weights_fingerprint
from mlmtrain.runtime.progress import say
from mlmtrain.tools.arguments import check_count, device_option
from mlmtrain.tools.probe import check_settings, load_encoder
from mlmtrain.train.model_card import CARD, add_scorecard
from mlmtrain.train.ownership import COMPLETE, MANIFEST_FILE, foreign_files, record_added

DEFAULT_SEEDS = 5


def scorecard_place(model: str, out: Optional[Path], inputs: list[tuple[str, Path]]) -> tuple[Path, Optional[Path]]:
    """(the scorecard's file, the checkpoint it lies in or None): --out, apart from every one of `inputs`, else
    CHECKPOINT/scorecard.json when the model is a complete mlmtrain checkpoint that holds only what mlmtrain wrote (it
    records what it adds)."""
    if out is not None:
        check_apart(out, "--out", inputs, "pass --out a .json file outside it")
        if out.is_dir():
            raise UserError("argument", f"--out {out} is a folder; pass a .json file for the scorecard")
        return out, None
    folder = Path(model).expanduser()
    if folder.is_dir() and (folder / COMPLETE).is_file() and (folder / MANIFEST_FILE).is_file():
        folder = folder.resolve()  # checkpoints/latest: the step it names
        if foreign_files(folder) == []:
            return folder / SCORECARD, folder
    raise UserError(
        "argument",
        f"--model {model} is not an mlmtrain checkpoint that holds only mlmtrain's files, so the scorecard is not "
        "written into it; pass --out FILE.json",
    )


def scored_model(model: str) -> tuple[str, str]:
    """(the model a scorecard names, its weights' fingerprint): a folder by the one its links lead to (the step a
    checkpoints/latest names now), a Hub name as it is, read from its local snapshot."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return str(folder.resolve()), weights_fingerprint(folder)
    return model, weights_fingerprint(hub_model_folder(model, "model", "--model"))


def scorecard(
    model: str,
    suite: str,
    settings: ProbeSettings,
    seeds: Optional[int] = None,
    out: Optional[Path] = None,
    resume: bool = False,
    device: str = "auto",
    tell: Callable[[str], None] = say,
) -> dict[str, Any]:
    """Fine-tune `model` on every task of `suite` for `seeds` seeds from settings.seed on; the scorecard's record
    (also written to its file after every task and seed, with its path under "path")."""
    check_settings(settings)
    if settings.mode != "finetune":
        raise UserError("argument", "--suite fine-tunes every task (its protocol); drop --mode linear")
    seeds = DEFAULT_SEEDS if seeds is None else seeds
    check_count(seeds, "--seeds")
    if settings.seed + seeds - 1 > LARGEST_INT:
        raise UserError("argument", f"--seed {settings.seed} and --seeds {seeds} pass {LARGEST_INT}; lower --seed")
    name, tasks = read_suite(suite)
    torch_device = device_option(device)
    config, tokenizer = load_encoder(model, settings)
    read = [("--model", model), ("--suite", suite if suite not in SUITES else None)]
    path, checkpoint = scorecard_place(model, out, local_inputs(read + [(f"task {t.name!r}", t.task) for t in tasks]))
    seed_list = [settings.seed + i for i in range(seeds)]
    scored, weights = scored_model(model)
    card = open_scorecard(path, scored, weights, name, tasks, protocol(settings, seed_list), resume)
    check_writable_folder(path.parent, "argument", "the scorecard's folder", create=False)
    if checkpoint is not None:  # each write listed in the checkpoint's record: the folder stays provably mlmtrain's
        card.after_save = lambda: record_added(checkpoint, [SCORECARD])
    record = run_suite(card, tasks, seed_list, str(model), config, tokenizer, settings, torch_device, tell)
    if checkpoint is not None and record["finished"]:
        add_scorecard(checkpoint, record)
        record_added(checkpoint, [CARD])
    return {**record, "path": str(path)}
