"""`mlmtrain push`: prints what `tools.push` uploaded, or with --dry-run would upload: the files on stdout, one
relative path a line, and a summary line on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

from mlmtrain.tools.push import push


def _size(total: int) -> str:
    return f"{total / 1e6:.1f} MB" if total >= 1e5 else f"{total / 1e3:.1f} kB"


def run_push_command(checkpoint: Path, repo: str, private: bool, dry_run: bool) -> None:
    """Push `checkpoint` to `repo` (or list its publishable files) and say so."""
    done = push(checkpoint, repo, private=private, dry_run=dry_run)
    files, size = done.files, _size(done.total)
    if dry_run:
        print("\n".join(files), flush=True)
        print(
            f"push --dry-run: {len(files)} files ({size}) of {done.folder} would go to {repo}"
            + (" (private)" if private else "")
            + (f"; left out: {', '.join(done.left_out)}" if done.left_out else ""),
            file=sys.stderr,
        )
    else:
        print(f"pushed {len(files)} files ({size}) to {done.url}", file=sys.stderr)
