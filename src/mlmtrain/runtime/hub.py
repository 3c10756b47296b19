"""Whether the Hugging Face Hub can be reached, asked once before a hub download: an offline machine gets one line
at once, instead of a dozen lines of retries over half a minute."""

from __future__ import annotations

import os
import socket
from typing import Optional
from urllib.parse import urlparse

_TRUE = {"1", "true", "yes", "on"}


def offline_mode() -> Optional[str]:
    """The variable that puts the Hugging Face libraries in offline mode (they then read their caches only)."""
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(variable, "").strip().lower() in _TRUE:
            return variable
    return None


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
