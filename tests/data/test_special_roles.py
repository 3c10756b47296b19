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

from ..helpers import tiny_overrides, write_corpus

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
    """The live stream cuts the blocks the store cuts, <s> first and </s> last and between documents: over one pass,
    the same blocks; and a run trains on it."""
    from mlmtrain.data.blocks import LiveMicroBatches, StoreBlocks, batch_layout
    from mlmtrain.data.masking import MaskingCollator, VocabInfo
    from mlmtrain.data.sources import corpus_splits

    cfg = _config(roberta_data, **{"data.use_store": False, "train.eval_every": 0})
    tokenize_corpus(cfg, quiet=True)
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    store = StoreBlocks(TokenStore(cfg.store_dir, "train"), cfg.data.seq_len, True, cls_id, sep_id)
    collator = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), cfg.masking, seed=0)
    live = LiveMicroBatches(
        corpus_splits(cfg.data)[0], cfg.tokenizer_dir, collator, batch_layout(8, None, 1, 0), cfg.data.seq_len, 0, 64, 0
    )
    blocks = [tuple(block.tolist()) for block in live._blocks(0, 1, epoch=0)]
    assert sorted(blocks) == sorted(tuple(store[i].tolist()) for i in range(len(store)))
    assert all(block[0] == cls_id and block[-1] == sep_id for block in blocks)
    assert sum(block[1:-1].count(sep_id) for block in blocks) > len(blocks) / 2  # documents end inside blocks
    final = pretrain(cfg)
    assert (final / "model.safetensors").is_file()


def test_a_tokenizer_without_a_separator_is_refused_in_one_line(tmp_path: Path) -> None:
    write_corpus(tmp_path / "train.txt", 50, seed=3)
    folder = roberta_named_tokenizer(tmp_path / "no-sep", tmp_path / "train.txt", sep_token="")
    with pytest.raises(UserError, match=r"no sep token \(it closes blocks"):
        load_tokenizer(folder)


LITERALS = ("[MASK]", "[SEP]", "[PAD]", "[CLS]", "[UNK]")


def test_special_tokens_written_in_the_text_are_text_in_the_store_the_live_stream_and_evaluation(
    tmp_path: Path,
) -> None:
    """A corpus that writes [MASK], [SEP], [PAD], [CLS] and [UNK]: they encode as the pieces of their characters,
    the same in the token store, the live stream and eval-perplexity's blocks, so the only special ids are the ones
    mlmtrain puts there ([SEP] closing each document, [CLS] opening each block); a user's [MASK] in mask-demo's
    argument stays the mask."""
    from mlmtrain.config import MaskingConfig
    from mlmtrain.data.blocks import LiveMicroBatches, StoreBlocks, batch_layout
    from mlmtrain.data.mask_demo import mask_demo
    from mlmtrain.data.masking import MaskingCollator, VocabInfo
    from mlmtrain.data.sources import Corpus
    from mlmtrain.evaluate.perplexity import PackedBlocks

    for split, documents, seed in (("train", 200, 21), ("valid", 40, 22)):
        lines = write_corpus(tmp_path / f"{split}.txt", documents, seed=seed).read_text().splitlines()
        written = [
            f"{line} {LITERALS[i % 5]} and {LITERALS[(i + 2) % 5]}{LITERALS[i % 5]}" for i, line in enumerate(lines)
        ]
        (tmp_path / f"{split}.txt").write_text("\n".join(written) + "\n")
    cfg = load_config(None, tiny_overrides(tmp_path, **{"train.run_dir": str(tmp_path / "run")}))
    tokenize_corpus(cfg, quiet=True)
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    specials = {role: getattr(tokenizer, f"{role}_token_id") for role in ("mask", "sep", "pad", "cls", "unk")}
    store = TokenStore(cfg.store_dir, "train")
    stream = store.tokens(0, store.num_tokens)
    for role, special in specials.items():
        expected = store.num_documents if role == "sep" else 0
        assert np.count_nonzero(stream == special) == expected, role
    assert tokenizer.decode(store.document(0).tolist()).endswith(". [ mask ] and [ pad ] [ mask ]")

    seq_len = cfg.data.seq_len
    blocks = StoreBlocks(store, seq_len, True, specials["cls"], specials["sep"])
    stored = [blocks[i] for i in range(len(blocks))]
    evaluated = list(PackedBlocks(Corpus(cfg.data.train), tokenizer, seq_len))
    assert [block.tolist() for block in evaluated] == [block.tolist() for block in stored]
    collator = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), MaskingConfig(), seed=0)
    live = LiveMicroBatches(
        Corpus(cfg.data.train), cfg.tokenizer_dir, collator, batch_layout(4, None, 1, 0), seq_len, 0, 16, 1
    )
    streamed = sorted(block.tolist() for block in live._blocks(0, 1, 0))
    assert streamed == sorted(block.tolist() for block in stored)

    demo = mask_demo("a [MASK] dog", tokenizer, MaskingConfig(), seed=0, seq_len=16)
    assert demo.ids.count(specials["mask"]) == 1 and not demo.maskable[demo.ids.index(specials["mask"])]
