"""The words `tokenizer.extend_vocab` adds to a base's vocabulary: their list beside the run (`added_words.txt`) and
their rows in the base's embedding and output tables, each the mean of the rows of the pieces the base split it into.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mlmtrain.config import Config
from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_record
from mlmtrain.errors import UserError

ADDED_WORDS = "added_words.txt"  # beside the run: the words tokenizer.extend_vocab added, one a line, in id order
ADDED_WORDS_HEADER = "# the words tokenizer.extend_vocab added to the base's vocabulary, written by mlmtrain\n"


def added_words(cfg: Config) -> list[str]:
    """The words tokenizer.extend_vocab added to the run's tokenizer (as its mlmtrain-tokenizer.json records)."""
    return list((tokenizer_record(cfg.tokenizer_dir) or {}).get("added_words") or [])


def write_added_words(cfg: Config, run_dir: Path) -> None:
    """RUN_DIR/added_words.txt, when the run's tokenizer has words tokenizer.extend_vocab added."""
    words = added_words(cfg)
    if words:
        text = ADDED_WORDS_HEADER + "".join(word + "\n" for word in words)
        (run_dir / ADDED_WORDS).write_text(text, encoding="utf-8")


def check_added_words_file(cfg: Config, run_dir: Path) -> None:
    """UserError when a run that extends the vocabulary would replace an added_words.txt mlmtrain did not write."""
    path = Path(run_dir) / ADDED_WORDS
    if not cfg.tokenizer.extend_vocab or not (path.exists() or path.is_symlink()):
        return
    try:
        ours = not path.is_symlink() and path.read_text(encoding="utf-8").startswith(ADDED_WORDS_HEADER)
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        raise UserError(
            "run",
            f"{path} is not the list of added words mlmtrain writes there (tokenizer.extend_vocab), and this run would "
            "replace it; move or rename it, or choose another train.run_dir",
        )


def add_word_rows(model: Any, cfg: Config) -> None:
    """Rows for the words tokenizer.extend_vocab added to the run's tokenizer (none: nothing): each word's
    embedding row and output bias start as the mean of those of the base's pieces of it."""
    words = added_words(cfg)
    if not words:
        return
    base, extended = load_tokenizer(cfg.model.init_from).backend_tokenizer, load_tokenizer(cfg.tokenizer_dir)
    ids = extended.convert_tokens_to_ids(words)
    model.resize_token_embeddings(max(model.config.vocab_size, max(ids) + 1), mean_resizing=False)
    tables = [model.get_input_embeddings().weight, model.get_output_embeddings().weight]
    bias = model.get_output_embeddings().bias
    with torch.no_grad():
        for word, new_id in zip(words, ids, strict=True):
            pieces = [token.id for token in base.model.tokenize(word)]
            for table in {id(t): t for t in tables}.values():  # the decoder is the embedding when they are tied
                table[new_id] = table[pieces].mean(0)
            if bias is not None:
                bias[new_id] = bias[pieces].mean()
