"""Tests of mlmtrain.data.tokenizer: real WordPiece training on a tiny corpus, the Hugging Face folder round trip,
the fingerprint and the user errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import tokenizers
import transformers

from mlmtrain.config import TokenizerConfig
from mlmtrain.data.tokenizer import (
    SPECIAL_TOKENS,
    is_tokenizer_folder,
    load_tokenizer,
    save_tokenizer,
    tokenizer_fingerprint,
    train_tokenizer,
)
from mlmtrain.errors import UserError

from ..helpers import assert_one_error_line, copy_corpus, run_cli, set_options

WORDS = (
    "the quick brown fox jumps over lazy dog while tokenizers learn pieces of words such as "
    "training masking encoder language model Café naïve résumé Über straße"
).split()


def corpus(count: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(
            rng.choice(WORDS).capitalize() if rng.random() < 0.3 else rng.choice(WORDS)
            for _ in range(rng.randint(3, 12))
        )
        for _ in range(count)
    ]


TEXTS = corpus()
PROBES = [
    "The Quick brown fox",
    "Café NAÏVE résumé straße",
    "unseen zebra words, punctuation! and 12345",
    "a [MASK] in the text",
    "[CLS] literal specials [SEP] [PAD]",
    "漢字 and emoji 🙂 and tabs\tand\nnewlines",
    "",
]


def small_cfg(**overrides) -> TokenizerConfig:
    values = {"vocab_size": 200, "min_frequency": 1}
    values.update(overrides)
    return TokenizerConfig(**values)


@pytest.fixture(scope="module")
def trained() -> tokenizers.Tokenizer:
    return train_tokenizer(TEXTS, small_cfg())


@pytest.fixture(scope="module")
def saved(trained, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tok") / "tokenizer"
    save_tokenizer(trained, folder, small_cfg(), model_max_length=128)
    return folder


def test_special_tokens_have_ids_0_to_4(trained):
    assert [trained.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert SPECIAL_TOKENS == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_training_learns_subwords_within_the_vocab_size(trained):
    vocab = trained.get_vocab()
    assert 100 < len(vocab) <= 200
    assert any(token.startswith("##") and len(token) > 3 for token in vocab)  # merges beyond single characters
    assert "quick" in vocab and "fox" in vocab


def test_encoding_adds_cls_and_sep_and_pair_type_ids(trained):
    single = trained.encode("the quick fox")
    assert (
        single.tokens[0] == "[CLS]" and single.tokens[-1] == "[SEP]" and single.tokens[1:-1] == ["the", "quick", "fox"]
    )
    pair = trained.encode("the fox", "lazy dog")
    assert pair.tokens == ["[CLS]", "the", "fox", "[SEP]", "lazy", "dog", "[SEP]"]
    assert pair.type_ids == [0, 0, 0, 0, 1, 1, 1]
    assert trained.decode(trained.encode("training tokenizers").ids) == "training tokenizers"


def test_training_reads_a_one_shot_stream_in_batches():
    generated = (text for text in TEXTS)  # a generator, as a corpus stream is
    streamed = train_tokenizer(generated, small_cfg(), batch_size=7)
    assert next(generated, None) is None
    # The trainer breaks count ties in hash-map order (tokenizers issue #1794): two trainings on the same text may
    # differ in ids and even in tokens, so check what does not depend on ties.
    assert all(streamed.token_to_id(word) is not None for word in ("quick", "brown", "training", "straße"))
    assert streamed.decode(streamed.encode("the lazy encoder").ids) == "the lazy encoder"


@pytest.mark.oldpins
def test_saved_folder_loads_in_transformers_with_equal_ids(trained, saved):
    assert {p.name for p in saved.iterdir()} == {
        "mlmtrain-tokenizer.json",  # mlmtrain's mark: a later tokenize may replace the folder
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.txt",
    }
    loaded = transformers.AutoTokenizer.from_pretrained(saved)
    assert loaded.is_fast and isinstance(loaded, transformers.PreTrainedTokenizerFast)
    assert loaded.mask_token == "[MASK]" and loaded.mask_token_id == 4
    assert (loaded.pad_token_id, loaded.unk_token_id, loaded.cls_token_id, loaded.sep_token_id) == (0, 1, 2, 3)
    assert loaded.model_max_length == 128
    assert len(loaded) == trained.get_vocab_size()
    for text in PROBES:
        assert loaded(text)["input_ids"] == trained.encode(text).ids, text
    pair = loaded("the fox", "lazy dog")
    assert pair["input_ids"] == trained.encode("the fox", "lazy dog").ids
    assert pair["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    vocab_lines = (saved / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab_lines[:5] == SPECIAL_TOKENS and len(vocab_lines) == trained.get_vocab_size()


def test_load_tokenizer_gives_the_fast_tokenizer(trained, saved):
    loaded = load_tokenizer(saved)
    assert loaded.is_fast and loaded.mask_token == "[MASK]"
    assert loaded("straße résumé")["input_ids"] == trained.encode("straße résumé").ids
    assert load_tokenizer(str(saved)).get_vocab() == loaded.get_vocab()


@pytest.mark.parametrize("lowercase", [True, False])
def test_lowercase_setting_is_respected_and_saved(tmp_path, lowercase):
    cfg = small_cfg(lowercase=lowercase)
    trained = train_tokenizer(TEXTS, cfg)
    same_ids = trained.encode("Quick Fox").ids == trained.encode("quick fox").ids
    assert same_ids is lowercase
    save_tokenizer(trained, tmp_path / "tok", cfg)
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is lowercase
    assert config["strip_accents"] is lowercase  # null follows lowercase, as in BERT
    loaded = load_tokenizer(tmp_path / "tok")
    for text in ("Quick Fox", "Café Über", "QUICK"):
        assert loaded(text)["input_ids"] == trained.encode(text).ids
    assert trained.encode("Über").tokens[1].startswith("u" if lowercase else "Ü")


def test_strip_accents_can_be_set_apart_from_lowercase(tmp_path):
    cfg = small_cfg(lowercase=True, strip_accents=False)
    trained = train_tokenizer(TEXTS, cfg)
    assert trained.encode("café").ids != trained.encode("cafe").ids
    save_tokenizer(trained, tmp_path / "tok", cfg)
    loaded = load_tokenizer(tmp_path / "tok")
    assert loaded("Café naïve")["input_ids"] == trained.encode("Café naïve").ids
    stripping = train_tokenizer(TEXTS, small_cfg(lowercase=True))
    assert stripping.encode("café").ids == stripping.encode("cafe").ids


def test_fingerprint_is_equal_after_round_trip_and_differs_otherwise(trained, saved):
    fingerprint = tokenizer_fingerprint(trained)
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0
    assert tokenizer_fingerprint(load_tokenizer(saved)) == fingerprint
    assert tokenizer_fingerprint(transformers.AutoTokenizer.from_pretrained(saved)) == fingerprint
    assert tokenizer_fingerprint(train_tokenizer(TEXTS, small_cfg(vocab_size=150))) != fingerprint
    assert tokenizer_fingerprint(train_tokenizer(corpus(seed=1), small_cfg())) != fingerprint
    cased = tokenizers.Tokenizer.from_str(trained.to_str())  # same vocabulary, another normalizer
    assert tokenizer_fingerprint(cased) == fingerprint
    cased.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=False, strip_accents=True)
    assert tokenizer_fingerprint(cased) != fingerprint


def test_save_replaces_an_existing_tokenizer_and_leaves_no_temporaries(tmp_path, trained):
    folder = tmp_path / "tok"
    save_tokenizer(trained, folder, small_cfg())
    other = train_tokenizer(corpus(seed=2), small_cfg(vocab_size=120))
    save_tokenizer(other, folder, small_cfg())
    assert tokenizer_fingerprint(load_tokenizer(folder)) == tokenizer_fingerprint(other)
    assert [p.name for p in tmp_path.iterdir()] == ["tok"]


def test_a_failed_save_keeps_the_previous_tokenizer(tmp_path, trained):
    folder = tmp_path / "tok"
    save_tokenizer(trained, folder, small_cfg())

    class FailingTokenizer:
        """Fails the way a full disk would, halfway through writing the folder."""

        def save(self, path: str) -> None:
            Path(path).write_text("{ partial")
            raise OSError("No space left on device")

    with pytest.raises(UserError, match=f"could not write the tokenizer {folder}: No space left"):
        save_tokenizer(FailingTokenizer(), folder, small_cfg())  # type: ignore[arg-type]
    assert tokenizer_fingerprint(load_tokenizer(folder)) == tokenizer_fingerprint(trained)
    assert [p.name for p in tmp_path.iterdir()] == ["tok"]


def test_save_refuses_to_replace_a_folder_that_is_not_a_tokenizer(tmp_path, trained):
    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    with pytest.raises(UserError, match="is not a folder mlmtrain wrote .*; set tokenizer.path to a new folder"):
        save_tokenizer(trained, folder, small_cfg())
    assert (folder / "checkpoints").is_dir()
    empty = tmp_path / "empty"
    empty.mkdir()
    save_tokenizer(trained, empty, small_cfg())
    assert is_tokenizer_folder(empty)


def test_is_tokenizer_folder(tmp_path, saved):
    assert is_tokenizer_folder(saved)
    assert not is_tokenizer_folder(tmp_path)
    assert not is_tokenizer_folder(tmp_path / "missing")
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert not is_tokenizer_folder(tmp_path)


# ---------------------------------------------------------------------------------------------
# User errors


def test_empty_corpus_is_a_user_error():
    with pytest.raises(UserError, match="no documents; point data.train"):
        train_tokenizer(iter([]), small_cfg())


def test_vocab_size_below_the_alphabet_is_a_user_error():
    with pytest.raises(UserError) as excinfo:
        train_tokenizer(TEXTS, small_cfg(vocab_size=30))
    message = str(excinfo.value)
    assert "tokenizer.vocab_size (30)" in message and "raise tokenizer.vocab_size" in message
    assert "limit_alphabet" in message and "\n" not in message


def test_loading_a_folder_without_tokenizer_files_names_what_is_missing(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(UserError) as excinfo:
        load_tokenizer(tmp_path)
    message = str(excinfo.value)
    assert str(tmp_path) in message and "tokenizer_config.json" in message and "vocab.txt" not in message


def test_loading_a_missing_folder_or_a_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(UserError, match="does not exist"):
        load_tokenizer("./no/such/folder")
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(UserError, match="is a file"):
        load_tokenizer(tmp_path / "file.json")


def test_a_corrupt_tokenizer_folder_is_a_user_error(tmp_path, saved):
    folder = tmp_path / "broken"
    folder.mkdir()
    for name in ("tokenizer_config.json", "vocab.txt"):
        (folder / name).write_bytes((saved / name).read_bytes())
    (folder / "tokenizer.json").write_text("{ not json")
    with pytest.raises(UserError, match=f"cannot load tokenizer {folder}"):
        load_tokenizer(folder)


def test_an_unreachable_hub_tokenizer_is_a_user_error(monkeypatch):
    import huggingface_hub.constants

    # offline mode makes the hub client fail at once instead of retrying for a minute
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as excinfo:
        load_tokenizer("no-such-org/no-such-tokenizer")
    assert str(excinfo.value).startswith("tokenizer: cannot load tokenizer no-such-org/no-such-tokenizer: ")


def test_limit_alphabet_with_a_byte_level_bpe_is_refused_rather_than_recorded_unused(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A byte-level BPE starts from the 256 bytes: tokenizer.limit_alphabet changed nothing in it, yet was recorded
    (and a change of it retrained the tokenizer). Refused in one line; dropped, the BPE is trained."""
    data = copy_corpus(tiny_data, tmp_path)
    bpe = {"tokenizer.kind": "bpe", "tokenizer.vocab_size": 400}
    code, lines = run_cli(
        capsys, "tokenize", *set_options(data, tmp_path / "run", **bpe, **{"tokenizer.limit_alphabet": 50})
    )
    assert code == 2
    assert_one_error_line(lines, "tokenizer.limit_alphabet (50)", "drop tokenizer.limit_alphabet")
    assert sorted(path.name for path in data.iterdir()) == ["train.txt", "valid.txt"]
    code, lines = run_cli(capsys, "tokenize", *set_options(data, tmp_path / "run", **bpe))
    assert code == 0, lines
    assert json.loads((data / "tokenizer" / "tokenizer.json").read_text())["model"]["type"] == "BPE"
