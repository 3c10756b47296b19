"""`tokenize` and `mask-demo`: the corpus encoded into the token store, and what masking does to one text."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

from mlmtrain.config import LARGEST_INT, Config
from mlmtrain.data.mask_demo import mask_demo as draw_demo
from mlmtrain.data.store import check_outputs_apart, tokenize_corpus
from mlmtrain.data.tokenizer import is_tokenizer_folder, load_tokenizer
from mlmtrain.errors import UserError, interrupt_on_sigterm
from mlmtrain.model.context import quiet_transformers
from mlmtrain.runtime.distributed import init_distributed, on_main, teardown
from mlmtrain.tools.arguments import check_count, training_config
from mlmtrain.train.guard import locked
from mlmtrain.train.init_from import resolve_init_from

MAX_DEMO_SAMPLES = 1_000_000  # mask-demo --samples: each share to about ±0.1 %, drawn in well under a minute


def tokenize(cfg: Config) -> Path:
    """Train (or reuse) the tokenizer and encode the corpus, holding train.run_dir's lock: a pretrain running there
    reads (and may rebuild) the tokenizer and store under it, so two commands must not write them at once.

    Under torchrun every process encodes its share of the corpus (gloo on the CPU) and process 0 writes the store."""
    cfg = resolve_init_from(cfg).cfg  # the tokenizer of model.init_from's base is the one to use
    check_outputs_apart(cfg)
    ctx = init_distributed("cpu")
    try:
        with ExitStack() as held, interrupt_on_sigterm():
            on_main(ctx, lambda: held.enter_context(locked(Path(cfg.train.run_dir))))  # process 0 writes there
            return tokenize_corpus(cfg, ctx=ctx)
    finally:
        teardown(ctx)


def _demo_tokenizer(cfg: Config, tokenizer: Optional[str], config: Optional[Path]) -> Any:
    """--tokenizer, else the config's tokenizer folder (or its tokenizer.pretrained) once `tokenize` has built it."""
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


def mask_demo(
    text: str,
    config: Optional[Path],
    overrides: Sequence[str],
    tokenizer: Optional[str],
    seed: Optional[int],
    samples: Optional[int],
) -> tuple[Any, Any]:
    """The masks the training collator draws for `text` under the config's masking settings, and the tokenizer
    that encoded it (which names the replacement tokens)."""
    if not text.strip():
        raise UserError("argument", 'TEXT is empty; give a sentence to mask, e.g. mlmtrain mask-demo "The cat sat."')
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UserError("argument", f"TEXT is not valid UTF-8 ({error.reason}); convert it to UTF-8") from None
    check_count(samples, "--samples")
    if samples is not None and samples > MAX_DEMO_SAMPLES:  # the draws run one text at a time: K sets the minutes
        raise UserError(
            "argument",
            f"--samples must be at most {MAX_DEMO_SAMPLES:,} (got {samples:,}); a million draws already give each "
            "share to about ±0.1 %",
        )
    if seed is not None and abs(seed) > LARGEST_INT:
        raise UserError("argument", f"--seed is out of range (got {seed}); it must lie within ±{LARGEST_INT}")
    cfg = training_config(config, list(overrides))
    loaded = _demo_tokenizer(cfg, tokenizer, config)
    with quiet_transformers():
        demo = draw_demo(text, loaded, cfg.masking, cfg.train.seed if seed is None else seed, cfg.data.seq_len, samples)
    return demo, loaded
