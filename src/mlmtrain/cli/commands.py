"""The printing of `eval-perplexity`, `fill-mask`, `mask-demo` and `average`: `tools` checks the arguments and
computes, these functions print its results (aligned lines or one JSON object on stdout) and read fill-mask's
stdin."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional, Union

from mlmtrain.errors import UserError
from mlmtrain.runtime.durable import json_safe
from mlmtrain.tools.masked_lm import evaluate_perplexity, fill_mask


def run_eval_command(as_json: bool, **arguments: Any) -> None:
    """`mlmtrain eval-perplexity`: `tools.masked_lm.evaluate_perplexity(**arguments)`, printed as a few aligned lines
    or one JSON object on stdout."""
    evaluation = evaluate_perplexity(**arguments)
    report = evaluation.report()
    print(json.dumps(json_safe(report)) if as_json else _table(report, evaluation.source), flush=True)


def _table(report: dict[str, Any], source: str) -> str:
    pseudo = report["mode"] == "pseudo"
    low, high = report["ci95"]
    masks = "" if pseudo else f", seed {report['seed']}"
    masks += ", attention within each document" if report["document_attention"] == "within" else ""
    rows = [
        ("model", report["model"]),
        ("data", source),
        ("blocks", f"{report['blocks']:,} x {report['seq_len']} tokens{masks}"),
        ("tokens", f"{report['tokens']:,}"),
        ("scored tokens" if pseudo else "masked tokens", f"{report['masked_tokens']:,}"),
        ("loss", f"{report['loss']:.4f}"),
        ("pseudo-perplexity" if pseudo else "perplexity", f"{report['perplexity']:.4f}"),
        ("accuracy", f"{report['accuracy']:.4f}"),
        ("95% interval", f"{low:.4f} to {high:.4f}" if math.isfinite(low) else "n/a (needs 2 blocks or more)"),
        ("seconds", f"{report['seconds']:.1f}"),
    ]
    width = max(len(name) for name, _ in rows) + 2
    return "\n".join(f"{name:<{width}}{value}" for name, value in rows)


def _not_utf8(where: str, error: UnicodeError) -> UserError:
    return UserError(
        "fill-mask", f"{where} is not valid UTF-8 ({error.reason}); convert the text to UTF-8 (iconv -t UTF-8)"
    )


def _fill_mask_lines(text: Optional[str]) -> Iterator[str]:
    """TEXT, or each non-blank stdin line, refused when not UTF-8. Python hands undecodable bytes of argv (and of
    stdin, under some locales) on as lone surrogates, which the tokenizer rejects with a TypeError."""
    if text is not None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise _not_utf8("TEXT", error) from None
        yield text
        return
    # stdin's bytes, decoded here line by line: a text stream decodes in chunks, so its error (under a strict
    # locale) could not say which line was bad; a stream with no bytes under it (a test's StringIO) is read as text
    raw = getattr(sys.stdin, "buffer", None)
    for number, line in enumerate(raw if raw is not None else sys.stdin, 1):
        try:
            line = line.decode("utf-8") if isinstance(line, bytes) else line
            line.encode("utf-8")
        except UnicodeError as error:
            raise _not_utf8(f"line {number} of stdin", error) from None
        if line.strip():
            yield line.rstrip("\r\n")


def run_fill_mask_command(model: Union[str, Path], text: Optional[str], top_k: int, device: str) -> None:
    """`mlmtrain fill-mask`: top-k completions with scores for every mask of TEXT (or of each stdin line)."""
    for number, (line, predictions) in enumerate(fill_mask(model, _fill_mask_lines(text), top_k, device)):
        masks = len(predictions)
        lines = [""] if number else []
        lines.append(line)
        for which, candidates in enumerate(predictions, 1):
            if masks > 1:
                lines.append(f"  mask {which} of {masks}")
            lines.extend(f"  {c['score']:.4f}  {c['token_str'].strip()}" for c in candidates)
        print("\n".join(lines), flush=True)


def run_mask_demo_command(as_json: bool, **arguments: Any) -> None:
    """`mlmtrain mask-demo`: the masks of `tools.tokens.mask_demo(**arguments)`, as a table or one JSON object."""
    from mlmtrain.data.mask_demo import as_json as demo_json
    from mlmtrain.data.mask_demo import render_text
    from mlmtrain.tools.tokens import mask_demo

    demo, tokenizer = mask_demo(**arguments)
    if as_json:
        print(json.dumps(demo_json(demo)), flush=True)
    else:
        print(render_text(demo, tokenizer.convert_ids_to_tokens), flush=True)


def run_average_command(checkpoints: list[Path], out: Path, last: Optional[int]) -> None:
    """`mlmtrain average`: the folder written and the checkpoints whose mean it holds."""
    from mlmtrain.tools.average import average_checkpoints

    done = average_checkpoints(checkpoints, out, last)
    names = ", ".join(str(folder) for folder in done.checkpoints)
    print(f"average: the mean of {len(done.checkpoints)} checkpoints ({names}) -> {done.folder}", flush=True)
