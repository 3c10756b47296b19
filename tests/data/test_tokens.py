"""The token store written by `tokenize`: contents, idempotence, atomicity and damage detection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mlmtrain.config import load_config
from mlmtrain.data.store import COMPLETE, TokenStore, ids_dtype, tokenize_corpus
from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_fingerprint
from mlmtrain.errors import UserError

from ..helpers import copy_corpus, store_files, tiny_overrides, write_corpus


def test_store_holds_every_document_with_sep(tiny_data: Path) -> None:
    store = TokenStore(tiny_data / "tokens", "train")
    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    lines = (tiny_data / "train.txt").read_text().splitlines()
    assert store.num_documents == len(lines)
    assert store.tokenizer_fingerprint == tokenizer_fingerprint(tokenizer)
    assert store.dtype == np.uint16
    for i in (0, 17, len(lines) - 1):
        assert store.document(i).tolist() == tokenizer(lines[i], add_special_tokens=False)["input_ids"]
    assert store.tokens(0, store.num_tokens)[-1] == tokenizer.sep_token_id
    assert (tiny_data / "tokens" / "mlmtrain.yaml").is_file()
    assert TokenStore(tiny_data / "tokens", "validation").num_documents == 60


def test_ids_dtype_widens_for_large_vocabularies() -> None:
    assert ids_dtype(30522) == np.uint16
    assert ids_dtype(65536) == np.uint16
    assert ids_dtype(65537) == np.uint32


def test_tokenize_twice_is_idempotent(tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = copy_corpus(tiny_data, tmp_path)
    cfg = load_config(None, tiny_overrides(root))
    store = tokenize_corpus(cfg, quiet=True)
    before = {p.name: p.stat().st_mtime_ns for p in store.iterdir()}
    capsys.readouterr()
    tokenize_corpus(cfg, quiet=True)
    assert "up to date" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in store.iterdir()} == before


def test_changed_corpus_rebuilds_the_store(tiny_data: Path, tmp_path: Path) -> None:
    root = copy_corpus(tiny_data, tmp_path)
    cfg = load_config(None, tiny_overrides(root))
    store = tokenize_corpus(cfg, quiet=True)
    documents = TokenStore(store, "train").num_documents
    write_corpus(root / "train.txt", 500, seed=9)
    tokenize_corpus(cfg, quiet=True)
    assert TokenStore(store, "train").num_documents == 500 != documents


def test_store_without_marker_or_with_short_shard_is_refused(tiny_data: Path, tmp_path: Path) -> None:
    store = tmp_path / "tokens"
    shutil.copytree(tiny_data / "tokens", store)
    shard = store_files(store)[0]
    with open(shard, "r+b") as handle:
        handle.truncate(shard.stat().st_size // 2)
    with pytest.raises(UserError, match="damaged"):
        TokenStore(store, "train")
    (store / COMPLETE).unlink()
    with pytest.raises(UserError, match="incomplete"):
        TokenStore(store, "train")


def test_missing_store_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="run `mlmtrain tokenize"):
        TokenStore(tmp_path / "nothing", "train")


def test_invalid_utf8_is_replaced_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "data"
    root.mkdir()
    write_corpus(root / "train.txt", 300)
    with open(root / "train.txt", "ab") as handle:
        handle.write(b"bad bytes \xff\xfe here and there\n")
    write_corpus(root / "valid.txt", 30, seed=3)
    tokenize_corpus(load_config(None, tiny_overrides(root)), quiet=True)
    err = capsys.readouterr().err
    assert "1 lines had invalid UTF-8" in err
    assert TokenStore(root / "tokens", "train").num_documents == 301


def test_empty_corpus_is_refused_and_leaves_no_store(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "train.txt").write_text("\n   \n\n")
    (root / "valid.txt").write_text("some text\n")
    with pytest.raises(UserError):
        tokenize_corpus(load_config(None, tiny_overrides(root)), quiet=True)
    assert not (root / "tokens").exists()
    assert not list(root.glob(".tokens.tmp-*"))


def test_an_existing_tokenizer_is_reused_instead_of_trained(tiny_data: Path, tmp_path: Path) -> None:
    root = copy_corpus(tiny_data, tmp_path)
    cfg = load_config(None, tiny_overrides(root, **{"tokenizer.pretrained": str(tiny_data / "tokenizer")}))
    store = tokenize_corpus(cfg, quiet=True)
    reused = load_tokenizer(root / "tokenizer")
    assert tokenizer_fingerprint(reused) == tokenizer_fingerprint(load_tokenizer(tiny_data / "tokenizer"))
    assert TokenStore(store, "train").tokenizer_fingerprint == tokenizer_fingerprint(reused)


def test_a_folder_that_holds_the_pretrained_tokenizer_already_is_kept_with_its_record(
    tiny_data: Path, tmp_path: Path
) -> None:
    """A run that takes its tokenizer from a model (tokenizer.pretrained: a distillation teacher, a base) and shares
    tokenizer.path with the run that trained that very tokenizer leaves the folder as it is: that run then finds it
    current, instead of training a new WordPiece (which may differ: tokenizers#1794) and a new store."""
    from mlmtrain.data.tokenizer import TOKENIZER_META

    root = copy_corpus(tiny_data, tmp_path)
    trained = load_config(None, tiny_overrides(root))
    tokenize_corpus(trained, quiet=True)
    record = (root / "tokenizer" / TOKENIZER_META).read_text()
    fingerprint = tokenizer_fingerprint(load_tokenizer(root / "tokenizer"))
    teacher = tmp_path / "teacher"  # the same tokenizer, saved in a model's folder
    shutil.copytree(root / "tokenizer", teacher)
    (teacher / TOKENIZER_META).unlink()
    tokenize_corpus(load_config(None, tiny_overrides(root, **{"tokenizer.pretrained": str(teacher)})), quiet=True)
    assert (root / "tokenizer" / TOKENIZER_META).read_text() == record
    tokenize_corpus(trained, quiet=True)
    assert (root / "tokenizer" / TOKENIZER_META).read_text() == record  # still current: nothing trained again
    assert tokenizer_fingerprint(load_tokenizer(root / "tokenizer")) == fingerprint


@pytest.mark.parametrize("meta", ["[1, 2]", "{format}"], ids=["not an object", "no splits"])
def test_a_store_meta_that_parses_but_is_not_a_stores_is_one_data_error(tmp_path: Path, meta: str) -> None:
    from mlmtrain.data.store import STORE_FORMAT, read_meta

    (tmp_path / COMPLETE).write_text("")
    (tmp_path / "meta.json").write_text(meta.replace("{format}", json.dumps({"format": STORE_FORMAT})))
    with pytest.raises(UserError, match="meta.json is damaged"):
        read_meta(tmp_path)
