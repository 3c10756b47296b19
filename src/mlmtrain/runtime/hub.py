"""The Hugging Face Hub: whether it can be reached, asked once before a hub download: an offline machine gets one line
at once, instead of a dozen lines of retries over half a minute. "Offline" is decided here alone, from every variable
the Hugging Face libraries read, and every library is then told the same; their messages go through the redaction.
A Hub model is read from its local snapshot (`hub_model_folder`).
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from mlmtrain.errors import UserError, first_line, redact_library_messages

_TRUE = {"1", "true", "yes", "on"}
# what each library reads: huggingface_hub HF_HUB_OFFLINE (else TRANSFORMERS_OFFLINE), datasets HF_DATASETS_OFFLINE
# (else the hub's), transformers the hub's; "0" in one of them does not undo another's "1"
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
# (module, attribute): where an imported library keeps the offline flag it read from the environment at import time
_OFFLINE_FLAGS = (
    ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_DATASETS_OFFLINE"),
)


def offline_mode() -> Optional[str]:
    """The variable that asks for offline mode (the first of OFFLINE_VARIABLES set to 1, true, yes or on), None when
    none does: one is enough, whatever the others say, and every library is told so (`libraries_offline`, and
    local_files_only for transformers and huggingface_hub). Asked before every hub access: from then on, whatever a
    library logs or warns goes through the redaction."""
    redact_library_messages()
    return next((v for v in OFFLINE_VARIABLES if os.environ.get(v, "").strip().lower() in _TRUE), None)


@contextmanager
def libraries_offline(offline: bool) -> Iterator[None]:
    """For the block, with `offline`: the imported libraries that keep an offline flag of their own (datasets, and
    huggingface_hub under it) offline too, whatever each read from the environment; their flags are put back after."""
    flags = [(module, name) for module, name in _OFFLINE_FLAGS if offline and hasattr(sys.modules.get(module), name)]
    saved = [getattr(sys.modules[module], name) for module, name in flags]
    for module, name in flags:
        setattr(sys.modules[module], name, True)
    try:
        yield
    finally:
        for (module, name), value in zip(flags, saved, strict=True):
            setattr(sys.modules[module], name, value)


def hub_unreachable() -> Optional[str]:
    """Why the Hub cannot be reached (offline mode, no connection), or None when a connection opens."""
    if offline_mode():
        return f"offline mode: {offline_mode()} is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as error:
        return f"{host}:{port}: {error.strerror or error}"
    return None


# a model's config, tokenizer (WordPiece, BPE merges, SentencePiece) and weights; not TF / Flax / ONNX copies
_MODEL_FILES = ["*.json", "vocab.txt", "merges.txt", "*.model", "*.safetensors"]


@functools.cache  # once a process: a run asks for a base's folder to check it, load it, read its pooler
def hub_model_folder(name: str, topic: str, key: str) -> Path:
    """The local snapshot of the Hub model `name` that option `key` names (downloaded, or from the cache offline or
    out of reach): its config, tokenizer and safetensors weights, or an older repository's PyTorch weights when it
    has none; a UserError of `topic` naming `key` when it cannot be had."""
    from huggingface_hub import snapshot_download  # the Hub client: loaded for the Hub alone

    unreachable = hub_unreachable()
    try:
        folder = Path(snapshot_download(name, allow_patterns=_MODEL_FILES, local_files_only=unreachable is not None))
        if not any(folder.glob("*.safetensors")):  # an older repository: PyTorch weights only
            patterns = [*_MODEL_FILES, "pytorch_model*.bin"]
            folder = Path(snapshot_download(name, allow_patterns=patterns, local_files_only=unreachable is not None))
    except Exception as error:  # not found, gated, network: many types, one meaning
        if unreachable:
            raise UserError(
                topic,
                f"{key} {name}: the Hugging Face Hub is unreachable ({unreachable}) and {name} is not in the local "
                "cache; pass a local model folder, or run once online",
            ) from None
        raise UserError(
            topic, f"{key} {name} cannot be downloaded from the Hugging Face Hub ({first_line(error)}); check the name"
        ) from None
    return folder
