"""Special tokens are found by their role, never by a BERT name: a tokenizer whose tokens are called <s>, </s>,
<pad>, <unk> and <mask> tokenizes, trains (store and live stream) and evaluates like a BERT one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from mlmtrain.config import load_config
from mlmtrain.data.store import TokenStore, tokenize_corpus
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.train.loop import pretrain

from ..conftest import tiny_overrides, write_corpus

ROLES = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}


def roberta_named_tokenizer(folder: Path, corpus: Path, **roles: str) -> Path:
    """A WordPiece tokenizer whose special tokens carry RoBERTa's names, saved as a transformers folder."""
    roles = {**ROLES, **roles}
    specials = list(dict.fromkeys(v for v in roles.values() if v))
    backend = Tokenizer(models.WordPiece(unk_token=roles["unk_token"] or "<unk>"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train([str(corpus)], trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials))
    if roles["cls_token"] and roles["sep_token"]:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{roles['cls_token']} $A {roles['sep_token']}",
            special_tokens=[(t, backend.token_to_id(t)) for t in (roles["cls_token"], roles["sep_token"])],
        )
    given = {role: token for role, token in roles.items() if token}
    PreTrainedTokenizerFast(tokenizer_object=backend, **given).save_pretrained(str(folder))
    return folder


@pytest.fixture
def roberta_data(tmp_path: Path) -> Path:
    write_corpus(tmp_path / "train.txt", 300, seed=11)
    write_corpus(tmp_path / "valid.txt", 60, seed=12)
    roberta_named_tokenizer(tmp_path / "roberta-tok", tmp_path / "train.txt")
    return tmp_path


def _config(root: Path, **extra: object):
    overrides = {
        "tokenizer.pretrained": str(root / "roberta-tok"),
        "train.run_dir": str(root / "run"),
        "train.max_steps": 4,
        "train.eval_every": 2,
        "checkpoint.save_every": 0,
        **extra,
    }
    return load_config(None, tiny_overrides(root, **overrides))


def test_store_and_training_use_the_tokenizers_own_separator(roberta_data: Path) -> None:
    cfg = _config(roberta_data)
    tokenize_corpus(cfg, quiet=True)
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    store = TokenStore(cfg.store_dir, "train")
    stream = store.tokens(0, store.num_tokens)
    assert tokenizer.sep_token == "</s>"
    assert np.count_nonzero(stream == tokenizer.sep_token_id) == store.num_documents  # one </s> closes each document
    final = pretrain(cfg)
    assert (final / "model.safetensors").is_file()
    metrics = (Path(cfg.train.run_dir) / "metrics.jsonl").read_text()
    assert '"eval_loss"' in metrics


def test_the_live_stream_packs_with_the_tokenizers_own_tokens(roberta_data: Path) -> None:
    cfg = _config(roberta_data, **{"data.use_store": False, "train.eval_every": 0})
    final = pretrain(cfg)
    assert (final / "model.safetensors").is_file()


def test_a_tokenizer_without_a_separator_is_refused_in_one_line(tmp_path: Path) -> None:
    write_corpus(tmp_path / "train.txt", 50, seed=3)
    folder = roberta_named_tokenizer(tmp_path / "no-sep", tmp_path / "train.txt", sep_token="")
    with pytest.raises(UserError, match=r"no sep token \(it closes blocks"):
        load_tokenizer(folder)
