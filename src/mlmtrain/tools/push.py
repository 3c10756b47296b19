"""`push`: publish a checkpoint to the Hugging Face Hub with `huggingface_hub`.

Only what a user of the model needs goes: the weights and config.json, the tokenizer files, the model card
(README.md) and mlmtrain.yaml (the resolved config the card shows too), in the folder and in any model subfolder
(an ELECTRA run's `generator/`). Never the training state (optimizer moments, RNG states: twice the model's size
and of no use to anyone but a resumed run), checkpoint.json or the COMPLETE marker.

What `--dry-run` lists is what a push uploads: the same checks refuse the same folders. A folder that holds a link is
refused (a link's target may lie anywhere and change before the upload), and so is a checkpoint whose mlmtrain.yaml
names a path of this machine (an older mlmtrain's): mlmtrain publishes files and folders by name only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mlmtrain.config import PATH_KEYS, published_value, read_yaml
from mlmtrain.data.tokenizer import TOKENIZER_FILES, TOKENIZER_META
from mlmtrain.errors import UserError, first_line, redact
from mlmtrain.runtime.hub import hub_unreachable

# the file names that are published, in the checkpoint folder and in a model subfolder (one holding config.json)
_WEIGHTS_FILES = re.compile(
    r"config\.json|generation_config\.json|model\.safetensors|model\.safetensors\.index\.json|model-[\w.-]+\.safetensors"
)
_TOP_ONLY = ("README.md", "mlmtrain.yaml")  # the card and the run's config describe the whole checkpoint
_UNFINISHED_MARKS = ("training_state.pt", "checkpoint.json")  # what tells a checkpoint from a plain model folder


def _model_file(name: str) -> bool:
    """A file of a Hugging Face model folder: weights, configs, tokenizer (not mlmtrain's record of its training)."""
    tokenizer_file = bool(TOKENIZER_FILES.fullmatch(name)) and name != TOKENIZER_META
    return tokenizer_file or bool(_WEIGHTS_FILES.fullmatch(name))


def _published(relative: str) -> bool:
    parts = relative.split("/")
    if len(parts) == 1:
        return parts[0] in _TOP_ONLY or _model_file(parts[0])
    return len(parts) == 2 and _model_file(parts[1])


def publishable_files(folder: Path) -> list[str]:
    """The files of `folder` that `push` uploads, as sorted relative POSIX paths: plain files only (no links), at
    the top or in a subfolder that holds a model's config.json."""
    folder = Path(folder)
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder).as_posix()
        if path.is_symlink() or not path.is_file() or not _published(relative):
            continue
        if "/" in relative and not (path.parent / "config.json").is_file():
            continue
        found.append(relative)
    return sorted(found)


def check_push_folder(folder: Path) -> Path:
    """The resolved folder, when it is a finished model folder that can be published; else a UserError."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise UserError("push", f"{folder} {what}; pass a checkpoint folder such as RUN_DIR/checkpoints/latest")
    resolved = folder.resolve()
    if (resolved / "checkpoints").is_dir() and not (resolved / "config.json").exists():
        raise UserError("push", f"{folder} is a run folder; pass one of its checkpoints: {folder}/checkpoints/latest")
    if any((resolved / mark).exists() for mark in _UNFINISHED_MARKS) and not (resolved / "COMPLETE").exists():
        raise UserError("push", f"{folder} is an unfinished checkpoint (no COMPLETE marker); push a complete one")
    _refuse_links(folder, resolved)
    if not (resolved / "config.json").is_file():
        raise UserError("push", f"{folder} has no config.json; it is not a model folder")
    if not (resolved / "model.safetensors").is_file() and not (resolved / "model.safetensors.index.json").is_file():
        raise UserError(
            "push", f"{folder} has no model.safetensors; push a folder that mlmtrain or save_pretrained wrote"
        )
    if not (resolved / "tokenizer_config.json").is_file():
        raise UserError("push", f"{folder} has no tokenizer (tokenizer_config.json); the model would not load alone")
    _refuse_local_paths(folder, resolved)
    return resolved


def _refuse_links(folder: Path, resolved: Path) -> None:
    """UserError naming the first link in the folder: push uploads plain files only, so that what it lists is what
    goes (the folder itself may be a link, as `checkpoints/latest` is: its target is what is read)."""
    for path in sorted(resolved.rglob("*")):  # rglob lists a linked folder but does not enter it
        if path.is_symlink():
            name = path.relative_to(resolved).as_posix()
            raise UserError(
                "push",
                f"{folder}/{name} is a link (to {os.readlink(path)}); push uploads plain files only: copy the folder "
                f"with its links resolved (cp -rL {folder} COPY) and push the copy",
            )


def _refuse_local_paths(folder: Path, resolved: Path) -> None:
    """UserError when the folder's mlmtrain.yaml names a file or folder by its path on this machine (an older
    mlmtrain wrote paths there and in the model card; this one writes names)."""
    if not (resolved / "mlmtrain.yaml").is_file():
        return
    try:
        saved = read_yaml(resolved / "mlmtrain.yaml")
    except UserError:  # not a config: it names no key
        return
    for dotted in PATH_KEYS:
        section, key = dotted.split(".")
        value = saved[section].get(key) if isinstance(saved.get(section), dict) else None
        if published_value(dotted, value) != value:
            raise UserError(
                "push",
                f"{folder}/mlmtrain.yaml names a path of this machine ({dotted}: {value}), as an older mlmtrain "
                f"wrote it; replace each path there and in README.md by its name "
                f"({published_value(dotted, value)}), then push again",
            )


def _check_repo_name(repo: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id  # the Hub client: loaded for the Hub alone

    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise UserError(
            "argument", f"--repo {repo!r} is not a Hub repository name; pass NAME or ORG/NAME (letters, digits, -_.)"
        ) from None


@dataclass(frozen=True)
class Push:
    """What a push uploads (or, dry, would upload): the files by relative path, their bytes, what stays behind."""

    folder: Path  # the checkpoint folder, resolved
    files: list[str]
    total: int  # bytes of `files`
    left_out: list[str]
    url: Optional[str]  # the commit's address; None for a dry run


def push(checkpoint: Path, repo: str, private: bool, dry_run: bool) -> Push:
    """Upload the publishable files of `checkpoint` to the Hub repository `repo` (created when missing), or with
    `dry_run` only find them."""
    _check_repo_name(repo)
    folder = check_push_folder(checkpoint)
    files = publishable_files(folder)
    total = sum((folder / name).stat().st_size for name in files)
    left_out = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if not path.is_dir())
    left_out = [name for name in left_out if name not in files]
    url = None if dry_run else _upload(folder, files, repo, private)
    return Push(folder, files, total, left_out, url)


def _upload(folder: Path, files: list[str], repo: str, private: bool) -> str:
    """Create the repository if needed and commit `files` in one commit; every failure is one UserError line."""
    from huggingface_hub import CommitOperationAdd, HfApi, get_token  # the Hub client: loaded for the Hub alone

    token = get_token()
    if not token:
        raise UserError("push", "no Hugging Face token; log in with `hf auth login` (or set HF_TOKEN), then run again")
    unreachable = hub_unreachable()
    if unreachable:
        raise UserError("push", f"the Hugging Face Hub is unreachable ({unreachable}); nothing was uploaded")
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name)) for name in files]
    try:
        created = api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
        commit = api.create_commit(
            created.repo_id, operations, commit_message=f"mlmtrain push of {folder.name}", repo_type="model"
        )
    except Exception as error:  # HTTP, network and validation errors of the hub client: one meaning, no upload
        raise UserError("push", f"could not push to {repo}: {first_line(error)}") from error
    return redact(str(getattr(commit, "repo_url", None) or created))  # built from HF_ENDPOINT: it may hold a password
