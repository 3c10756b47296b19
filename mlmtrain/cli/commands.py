"""The command layer of `eval-perplexity` and `fill-mask`: check the arguments, call the library, print.

`cli.py` maps options to these functions; the scoring itself lives in `evaluate.py`, which prints nothing.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, Union

import torch

from mlmtrain.config import LARGEST_INT
from mlmtrain.data.masking import evaluation_masking
from mlmtrain.errors import UserError
from mlmtrain.evaluate.perplexity import (
    DEFAULT_SEQ_LEN,
    EvalResult,
    check_checkpoint_folder,
    evaluate_texts,
    load_masked_lm,
)
from mlmtrain.model.context import quiet_transformers
from mlmtrain.model.families import model_positions
from mlmtrain.train.precision import resolve_precision


def _device(name: str) -> torch.device:
    from mlmtrain.runtime.distributed import resolve_device

    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise UserError("argument", f"--device must be auto, cpu, cuda or cuda:N (got {name!r})")
    try:
        return resolve_device(name)
    except UserError as error:  # its message speaks of train.device
        raise UserError("argument", error.message.replace("train.device", "--device")) from None


def _saved_config(folder: Path) -> Optional[Path]:
    """The mlmtrain.yaml that describes the model in `folder`: its own, or for the `generator/` of an ELECTRA
    checkpoint the one beside the discriminator, so the generator is scored as its whole checkpoint is."""
    from mlmtrain.model.electra import GENERATOR_DIR, generator_folder

    if (folder / "mlmtrain.yaml").is_file():
        return folder / "mlmtrain.yaml"
    folder = folder.absolute()
    # with generator/config.json there, generator_folder answers (it raises only for a discriminator without one)
    if folder.name == GENERATOR_DIR and (folder / "config.json").is_file() and generator_folder(folder.parent):
        saved = folder.parent / "mlmtrain.yaml"
        return saved if saved.is_file() else None
    return None


def _checkpoint_seq_len(saved: Optional[Path]) -> Optional[int]:
    """data.seq_len of a saved mlmtrain.yaml (None when there is none)."""
    from mlmtrain.config import read_yaml

    if saved is None:
        return None
    settings = read_yaml(saved)
    data = settings.get("data") if isinstance(settings, dict) else None  # a damaged file: the model's own length
    value = data.get("seq_len") if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _masked_lm_folder(folder: Path) -> Path:
    """`folder`, or the generator of an ELECTRA checkpoint folder (said in one line on stderr)."""
    from mlmtrain.model.electra import generator_folder

    generator = generator_folder(folder)
    if generator is None:
        return folder
    print(f"{folder} is an ELECTRA checkpoint: using its generator {generator} as the masked LM", file=sys.stderr)
    return generator


MAX_DEMO_SAMPLES = 1_000_000  # mask-demo --samples: each share to about ±0.1 %, drawn in well under a minute


def _positive(value: Optional[int], flag: str) -> None:
    if value is not None and value < 1:
        raise UserError("argument", f"{flag} must be >= 1 (got {value})")
    if value is not None and value > LARGEST_INT:
        raise UserError("argument", f"{flag} is out of range (got {value}); it must be at most {LARGEST_INT}")


def run_eval_command(
    model: Union[str, Path],
    data: Optional[str],
    config: Optional[Path],
    overrides: Union[Sequence[str], dict[str, Any]],
    seq_len: Optional[int],
    seed: Optional[int],
    batch_size: int,
    max_blocks: Optional[int],
    pseudo: bool,
    max_tokens: Optional[int],
    device: str,
    as_json: bool,
    show: bool = True,
) -> EvalResult:
    """`mlmtrain eval-perplexity`: perplexity of a masked-LM folder on --data (or the validation split of --config),
    printed (with `show`) as a few aligned lines or one JSON object on stdout."""
    from mlmtrain.config import load_config
    from mlmtrain.data.sources import corpus_splits, open_corpus

    if data is None and config is None:
        raise UserError("argument", "say what to evaluate on: --data SOURCE, or --config C for its validation split")
    for value, flag in ((batch_size, "--batch-size"), (max_blocks, "--max-blocks"), (max_tokens, "--max-tokens")):
        _positive(value, flag)
    if max_tokens is not None and not pseudo:
        raise UserError("argument", "--max-tokens caps --pseudo; for masked-LM perplexity use --max-blocks")
    cfg = load_config(config, overrides if isinstance(overrides, dict) else list(overrides))
    checkpoint = Path(model)
    folder = _masked_lm_folder(checkpoint)
    check_checkpoint_folder(folder)  # before the slow parts, so a mistyped path fails at once
    if data is not None:
        corpus, source = open_corpus(data, cfg.data, key="--data"), data
    else:
        corpus, source = corpus_splits(cfg.data)[1], f"the validation split of {config}"
    seq_len_from = "--seq-len"
    if seq_len is None and "data.seq_len" in cfg.stated:  # the config's blocks: models compared on the same
        seq_len, seq_len_from = cfg.data.seq_len, f"data.seq_len of {config}" if config else "data.seq_len"
    if seq_len is None:
        saved = _saved_config(checkpoint)
        seq_len, seq_len_from = _checkpoint_seq_len(saved), f"data.seq_len of {saved}"
    if seq_len is None:
        seq_len, seq_len_from = DEFAULT_SEQ_LEN, "the default --seq-len"
    if seq_len < 8:
        raise UserError("argument", f"{seq_len_from} must be >= 8 (got {seq_len}); pass --seq-len 8 or more")
    torch_device = _device(device)
    mlm, tokenizer = load_masked_lm(folder)
    positions = model_positions(mlm.config)
    if positions is not None and seq_len > positions:
        raise UserError(
            "argument",
            f"{seq_len_from} is {seq_len}, beyond the model's {positions} positions (max_position_embeddings); "
            f"pass --seq-len {positions} or less",
        )
    seed = cfg.masking.eval_seed if seed is None else seed
    # autocast as `pretrain` picks it for train.precision auto (bf16 on GPUs and AMX CPUs): the loss itself is
    # still taken in float32 and summed in float64
    result = evaluate_texts(
        mlm.to(torch_device),
        tokenizer,
        corpus,
        seq_len,
        evaluation_masking(cfg.masking),  # the classic 15 % masks, whatever masking the config trains with
        seed,
        batch_size,
        torch_device,
        resolve_precision("auto", torch_device).dtype,
        max_blocks=max_blocks,
        pseudo=pseudo,
        max_tokens=max_tokens,
        source=source,
        progress=True,
    )
    report = {**result.as_dict(), "model": str(folder), "seq_len": seq_len, "seed": seed}
    report["mode"] = "pseudo" if pseudo else "mlm"
    if show and as_json:
        print(json.dumps(_json_safe(report)), flush=True)
    elif show:
        print(_table(report, source), flush=True)
    return result


def _json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity: an undefined figure (one block has no interval) is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def _table(report: dict[str, Any], source: str) -> str:
    pseudo = report["mode"] == "pseudo"
    low, high = report["ci95"]
    masks = "" if pseudo else f", seed {report['seed']}"
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


def run_tokenize_command(cfg: Any) -> Path:
    """`mlmtrain tokenize`, holding train.run_dir's lock: a pretrain running there reads (and may rebuild) the
    tokenizer and store under it, so two commands must not write them at once."""
    from mlmtrain.data.store import tokenize_corpus
    from mlmtrain.errors import interrupt_on_sigterm
    from mlmtrain.train.guard import locked
    from mlmtrain.train.init_from import resolve_init_from

    resolve_init_from(cfg)  # the tokenizer of model.init_from's base is the one to use
    with locked(Path(cfg.train.run_dir)), interrupt_on_sigterm():
        return tokenize_corpus(cfg)


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
    for number, (line, predictions) in enumerate(fill_mask_predictions(model, _fill_mask_lines(text), top_k, device)):
        masks = len(predictions)
        lines = [""] if number else []
        lines.append(line)
        for which, candidates in enumerate(predictions, 1):
            if masks > 1:
                lines.append(f"  mask {which} of {masks}")
            lines.extend(f"  {c['score']:.4f}  {c['token_str'].strip()}" for c in candidates)
        print("\n".join(lines), flush=True)


def fill_mask_predictions(
    model: Union[str, Path], texts: Iterable[str], top_k: int, device: str
) -> Iterator[tuple[str, list[list[dict[str, Any]]]]]:
    """(text, one list of the pipeline's top-k candidates per mask) for each text, after checking it fits."""
    from transformers import pipeline

    _positive(top_k, "--top-k")
    torch_device = _device(device)
    mlm, tokenizer = load_masked_lm(_masked_lm_folder(Path(model)))
    vocabulary = len(tokenizer)
    if top_k > vocabulary:
        raise UserError("argument", f"--top-k {top_k} is more than the model's {vocabulary} tokens; pass {vocabulary}")
    mask = tokenizer.mask_token
    positions = model_positions(mlm.config)
    with quiet_transformers():
        fill = pipeline("fill-mask", model=mlm, tokenizer=tokenizer, device=torch_device, trust_remote_code=False)
    for line in texts:
        # the literal [MASK] works whatever the model calls its mask token (<mask> for RoBERTa-style ones)
        query = line.replace("[MASK]", mask) if mask != "[MASK]" else line
        masks = query.count(mask)
        if masks == 0:
            raise UserError("fill-mask", f"no {mask} in {line!r}; put [MASK] where a word should be predicted")
        with quiet_transformers():  # no "sequence length is longer" warning: the check below says it in one line
            length = len(tokenizer(query)["input_ids"])
        if positions is not None and length > positions:
            raise UserError(
                "fill-mask",
                f"the text is {length} tokens, more than the model's {positions} positions "
                "(max_position_embeddings); shorten it",
            )
        predictions = fill(query, top_k=top_k)
        if masks == 1:  # the pipeline nests the list only when there are several masks
            predictions = [predictions]
        yield line, predictions


def _demo_tokenizer(cfg: Any, tokenizer: Optional[str], config: Optional[Path]) -> Any:
    """--tokenizer, else the config's tokenizer folder (or its tokenizer.pretrained) once `tokenize` has built it."""
    from mlmtrain.data.tokenizer import is_tokenizer_folder, load_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    if is_tokenizer_folder(cfg.tokenizer_dir):
        return load_tokenizer(cfg.tokenizer_dir)
    if cfg.tokenizer.pretrained:
        return load_tokenizer(cfg.tokenizer.pretrained)
    given = f" --config {config}" if config is not None else ""
    raise UserError(
        "tokenizer",
        f"the config's tokenizer {cfg.tokenizer_dir} is not built yet; run `mlmtrain tokenize{given}` first, "
        "or pass --tokenizer DIR",
    )


def run_mask_demo_command(
    text: str,
    config: Optional[Path],
    overrides: Sequence[str],
    tokenizer: Optional[str],
    seed: Optional[int],
    samples: Optional[int],
    as_json: bool,
) -> None:
    """`mlmtrain mask-demo`: the masks the training collator draws for TEXT under the config's masking settings."""
    from mlmtrain.config import load_config
    from mlmtrain.data.mask_demo import as_json as demo_json
    from mlmtrain.data.mask_demo import mask_demo, render_text

    if not text.strip():
        raise UserError("argument", 'TEXT is empty; give a sentence to mask, e.g. mlmtrain mask-demo "The cat sat."')
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UserError("argument", f"TEXT is not valid UTF-8 ({error.reason}); convert it to UTF-8") from None
    _positive(samples, "--samples")
    if samples is not None and samples > MAX_DEMO_SAMPLES:  # the draws run one text at a time: K sets the minutes
        raise UserError(
            "argument",
            f"--samples must be at most {MAX_DEMO_SAMPLES:,} (got {samples:,}); a million draws already give each "
            "share to about ±0.1 %",
        )
    if seed is not None and abs(seed) > LARGEST_INT:
        raise UserError("argument", f"--seed is out of range (got {seed}); it must lie within ±{LARGEST_INT}")
    cfg = load_config(config, list(overrides))
    loaded = _demo_tokenizer(cfg, tokenizer, config)
    with quiet_transformers():
        demo = mask_demo(text, loaded, cfg.masking, cfg.train.seed if seed is None else seed, cfg.data.seq_len, samples)
    if as_json:
        print(json.dumps(demo_json(demo)), flush=True)
    else:
        print(render_text(demo, loaded.convert_ids_to_tokens), flush=True)
