"""The tokenizer `tokenize` trains (tokenizer.kind: WordPiece, or a byte-level BPE, both with BERT's special tokens):
train it from a stream of documents, save it as a Hugging Face folder, load it back.

A saved folder loads with `transformers.AutoTokenizer.from_pretrained(folder)` (no mlmtrain needed) and encodes any
text to exactly the ids of the trained `tokenizers.Tokenizer`; `tokenizer_fingerprint` ties token stores to it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Optional, Union

import tokenizers
import transformers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from mlmtrain.config import TokenizerConfig, looks_like_path
from mlmtrain.errors import UserError, first_line
from mlmtrain.readers import read_json
from mlmtrain.runtime.files import replace_folder
from mlmtrain.runtime.hub import hub_unreachable
from mlmtrain.runtime.model_folder import check_folder, from_pretrained

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = [PAD, UNK, CLS, SEP, MASK]  # the trainer gives them ids 0..4 in this order
TOKENIZER_KINDS = {"wordpiece": "WordPiece", "bpe": "byte-level BPE"}  # tokenizer.kind, as messages name it

_CONFIG_FILE = "tokenizer_config.json"
_VOCAB_FILES = ("tokenizer.json", "vocab.txt")  # either one lets transformers build the tokenizer
TOKENIZER_META = "mlmtrain-tokenizer.json"  # how mlmtrain made the tokenizer; also the mark of a folder it wrote
# every name a tokenizer folder of mlmtrain's holds (transformers' save_pretrained included)
TOKENIZER_FILES = re.compile(
    r"tokenizer\.json|tokenizer_config\.json|vocab\.txt|special_tokens_map\.json|added_tokens\.json"
    r"|vocab\.json|merges\.txt|spm\.model|sentencepiece\.bpe\.model|tokenizer\.model"  # BPE and SentencePiece files
    r"|chat_template\.(?:jinja|json)|" + re.escape(TOKENIZER_META)
)


def _strip_accents(cfg: TokenizerConfig) -> bool:
    # Resolved here rather than left None: the saved folder then states it, and the fingerprint of the trained
    # object equals that of the reloaded one (BertNormalizer keeps None and True apart in its settings).
    return cfg.lowercase if cfg.strip_accents is None else cfg.strip_accents


def _untrained_bpe(cfg: TokenizerConfig) -> tokenizers.Tokenizer:
    """A byte-level BPE (every text encodes, no [UNK]) that marks each word's first piece with 'Ġ', the first word of
    a text too (add_prefix_space), so whole-word masks find every word; cased unless tokenizer.lowercase."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    steps = [normalizers.NFD(), normalizers.StripAccents()] if _strip_accents(cfg) else []
    steps += [normalizers.Lowercase()] if cfg.lowercase else []
    if steps:
        tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _untrained_tokenizer(cfg: TokenizerConfig) -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=_strip_accents(cfg), lowercase=cfg.lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _batches(texts: Iterable[str], batch_size: int, seen: list[int]) -> Iterator[list[str]]:
    """Lists of at most batch_size texts; counts the texts in seen[0] (the trainer gives no count back)."""
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == batch_size:
            seen[0] += len(batch)
            yield batch
            batch = []
    if batch:
        seen[0] += len(batch)
        yield batch


MAX_WORD_CHARS = 100  # WordPiece's max_input_chars_per_word: a longer word encodes as [UNK]
_LONG_RUN = re.compile(rf"\S{{{MAX_WORD_CHARS + 1},}}")  # a run that may hold a word too long (cheap to find)


def _without_long_words(text: str, splitter: tokenizers.Tokenizer, dropped: list[int]) -> str:
    """`text` without its words of more than MAX_WORD_CHARS characters, as `splitter` splits words; counts them.

    `splitter` must not be the tokenizer being trained: training holds its lock, and using it here would deadlock.
    """

    def shorten(match: re.Match) -> str:
        normalized = splitter.normalizer.normalize_str(match.group())  # CJK characters become words of their own
        words = [word for word, _ in splitter.pre_tokenizer.pre_tokenize_str(normalized)]
        kept = [word for word in words if len(word) <= MAX_WORD_CHARS]
        dropped[0] += len(words) - len(kept)
        return " ".join(kept)

    return _LONG_RUN.sub(shorten, text) if _LONG_RUN.search(text) else text


def train_tokenizer(
    texts: Iterable[str],
    cfg: TokenizerConfig,
    batch_size: int = 1000,
    show_progress: bool = False,
    report: Optional[Callable[[str], None]] = None,
) -> tokenizers.Tokenizer:
    """Train a BERT-style WordPiece tokenizer on a stream of documents (read once, in batches: memory stays bounded).

    Words longer than MAX_WORD_CHARS are left out of training (`report` is told how many): they encode as [UNK]
    anyway, and the trainer's cost grows with the square of a word's length (a 200 kB word took 46 s).
    """
    seen, dropped = [0], [0]
    if cfg.kind == "bpe":  # every byte is in its alphabet: a long word costs pieces, not an [UNK]
        tokenizer = _untrained_bpe(cfg)
        trainer = trainers.BpeTrainer(
            vocab_size=cfg.vocab_size,
            min_frequency=cfg.min_frequency,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=show_progress,
        )
        tokenizer.train_from_iterator(_batches(texts, batch_size, seen), trainer=trainer)
    else:
        tokenizer = _untrained_tokenizer(cfg)
        trainer = trainers.WordPieceTrainer(
            vocab_size=cfg.vocab_size,
            min_frequency=cfg.min_frequency,
            limit_alphabet=cfg.limit_alphabet,
            special_tokens=SPECIAL_TOKENS,
            continuing_subword_prefix="##",
            show_progress=show_progress,
        )
        splitter = _untrained_tokenizer(cfg)
        short_words = (_without_long_words(text, splitter, dropped) for text in texts)
        tokenizer.train_from_iterator(_batches(short_words, batch_size, seen), trainer=trainer)
    if dropped[0] and report is not None:
        report(
            f"tokenizer: {dropped[0]:,} words longer than {MAX_WORD_CHARS} characters left out of training "
            "(they encode as [UNK], as in BERT)"
        )
    if seen[0] == 0:
        raise UserError("tokenizer", "the training corpus has no documents; point data.train at some text")
    learned = tokenizer.get_vocab_size(with_added_tokens=True)
    if learned > cfg.vocab_size:
        # The trainer never drops characters it kept, so a too-small vocab_size silently grows: say so instead.
        fix = "" if cfg.kind == "bpe" else " or lower tokenizer.limit_alphabet"  # a BPE's alphabet is its 256 bytes
        raise UserError(
            "tokenizer",
            f"tokenizer.vocab_size ({cfg.vocab_size}) is below the {learned} special tokens and characters the corpus "
            f"needs; raise tokenizer.vocab_size well above {learned}{fix}",
        )
    if cfg.kind == "bpe":  # [MASK] takes the space before it, as the word it hides begins with 'Ġ' (RoBERTa's rule)
        tokenizer.add_special_tokens([tokenizers.AddedToken(MASK, lstrip=True, normalized=False, special=True)])
    # Set after training so the template's ids are the trained ids of [CLS] and [SEP].
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}",
        pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, tokenizer.token_to_id(CLS)), (SEP, tokenizer.token_to_id(SEP))],
    )
    return tokenizer


def _normalizer_settings(backend: tokenizers.Tokenizer) -> dict:
    return json.loads(backend.to_str())["normalizer"] or {}


def _tokenizer_config(tokenizer: tokenizers.Tokenizer, model_max_length: int) -> dict:
    normalizer = _normalizer_settings(tokenizer)
    decoder = tokenizer.get_added_tokens_decoder()
    added = {
        str(index): {
            "content": token.content,
            "lstrip": token.lstrip,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for index, token in sorted(decoder.items())
    }
    special = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS, "mask_token": MASK}
    if json.loads(tokenizer.to_str())["model"]["type"] == "BPE":  # transformers loads it from tokenizer.json as it is
        return {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "clean_up_tokenization_spaces": False,
            "model_max_length": model_max_length,
            **special,
            "added_tokens_decoder": added,
        }
    return {
        # transformers 5 strips "Fast" and rebuilds a BertTokenizer from the vocabulary and the settings below,
        # transformers 4 loads tokenizer.json into BertTokenizerFast: both encode like `tokenizer`.
        "tokenizer_class": "BertTokenizerFast",
        "do_lower_case": bool(normalizer.get("lowercase", True)),
        "strip_accents": normalizer.get("strip_accents"),
        "tokenize_chinese_chars": bool(normalizer.get("handle_chinese_chars", True)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        **special,
        "added_tokens_decoder": added,
    }


def _write_vocab(folder: Path, vocab: dict[str, int]) -> None:
    """vocab.txt: one token per line, in id order (line N is token id N)."""
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in sorted(vocab, key=vocab.__getitem__)), "utf-8")


def _write_folder(tokenizer: tokenizers.Tokenizer, folder: Path, model_max_length: int) -> None:
    tokenizer.save(str(folder / "tokenizer.json"))
    if json.loads(tokenizer.to_str())["model"]["type"] == "WordPiece":  # vocab.txt is WordPiece's second form
        _write_vocab(folder, tokenizer.get_vocab(with_added_tokens=True))
    config = _tokenizer_config(tokenizer, model_max_length)
    (folder / _CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    special = {key: config[key] for key in ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", "utf-8")


def save_tokenizer(
    tokenizer: tokenizers.Tokenizer,
    folder: Path,
    cfg: TokenizerConfig,
    model_max_length: int = 512,
    record: Optional[dict] = None,
) -> None:
    """Write a Hugging Face tokenizer folder atomically: built beside `folder`, swapped in only once complete.

    `record` goes to mlmtrain-tokenizer.json, the marker that tells a folder mlmtrain may replace later.
    `cfg` is accepted for symmetry with training; the folder records the settings of `tokenizer` itself.
    """
    del cfg  # the trained object already carries lowercase / strip_accents in its normalizer

    def write(staging: Path) -> None:
        _write_folder(tokenizer, staging, model_max_length)
        (staging / TOKENIZER_META).write_text(json.dumps(record or {}, indent=1), encoding="utf-8")

    _replace_tokenizer_folder(Path(folder), write)


def copy_tokenizer(tokenizer: transformers.PreTrainedTokenizerFast, folder: Path, record: dict) -> None:
    """Save a loaded tokenizer (a checkpoint's, a hub one) as mlmtrain's tokenizer folder, atomically."""

    def write(staging: Path) -> None:
        save_tokenizer_files(tokenizer, staging)
        (staging / TOKENIZER_META).write_text(json.dumps(record, indent=1), encoding="utf-8")

    _replace_tokenizer_folder(Path(folder), write)


def save_tokenizer_files(tokenizer: transformers.PreTrainedTokenizerBase, folder: Union[str, Path]) -> None:
    """`tokenizer.save_pretrained(folder)` without the `auto_map` a loaded tokenizer_config.json may carry (what
    mlmtrain writes never points at code), then the files transformers 5 leaves out: `vocab.txt` (of a WordPiece
    tokenizer) and `special_tokens_map.json`. The slow `BertTokenizer`, `use_fast=False` and transformers 4 read
    them, so the folder loads under every transformers version whichever one wrote it."""
    folder = Path(folder)
    tokenizer.save_pretrained(str(folder))
    settings = json.loads((folder / _CONFIG_FILE).read_text(encoding="utf-8"))
    if settings.pop("auto_map", None) is not None:
        (folder / _CONFIG_FILE).write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", "utf-8")
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not (folder / "vocab.txt").exists() and backend is not None:
        vocab = backend.get_vocab(with_added_tokens=True)
        # vocab.txt gives a token's id by its line: written only for a WordPiece vocabulary with no gaps in its ids
        if json.loads(backend.to_str())["model"]["type"] == "WordPiece" and sorted(vocab.values()) == list(
            range(len(vocab))
        ):
            _write_vocab(folder, vocab)
    if not (folder / "special_tokens_map.json").exists():
        special = json.dumps(tokenizer.special_tokens_map, indent=2, ensure_ascii=False)
        (folder / "special_tokens_map.json").write_text(special + "\n", "utf-8")


def extendable_vocab(tokenizer: transformers.PreTrainedTokenizerFast, name: str) -> dict[str, int]:
    """The WordPiece vocabulary of `tokenizer`, if new words can be appended to it (UserError otherwise)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    if model.get("type") != "WordPiece":
        raise UserError(
            "tokenizer",
            f"tokenizer.extend_vocab extends WordPiece tokenizers, and the one of {name} is {model.get('type')}; "
            "drop tokenizer.extend_vocab",
        )
    vocab = model["vocab"]
    if len(tokenizer) != len(vocab) or sorted(vocab.values()) != list(range(len(vocab))):
        raise UserError(
            "tokenizer",
            f"tokenizer.extend_vocab cannot extend the tokenizer of {name}: it has tokens beyond its WordPiece "
            f"vocabulary ({len(tokenizer)} tokens, {len(vocab)} in the vocabulary); drop tokenizer.extend_vocab",
        )
    return vocab


def frequent_split_words(
    tokenizer: transformers.PreTrainedTokenizerFast, texts: Iterable[str], limit: int, name: str
) -> list[str]:
    """Up to `limit` words of `texts` (as the tokenizer normalizes and splits them), most frequent first (ties in
    alphabetical order), that it encodes as several pieces, none unknown; each seen at least twice."""

    vocab = extendable_vocab(tokenizer, name)
    backend = tokenizer.backend_tokenizer
    counts: Counter[str] = Counter()
    for text in texts:
        normalized = backend.normalizer.normalize_str(text) if backend.normalizer else text
        counts.update(word for word, _ in backend.pre_tokenizer.pre_tokenize_str(normalized))
    words = []
    for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if len(words) == limit or count < 2:
            break
        if word in vocab or not any(c.isalpha() for c in word):
            continue
        pieces = [token.value for token in backend.model.tokenize(word)]
        if len(pieces) > 1 and tokenizer.unk_token not in pieces:
            words.append(word)
    return words


def extend_tokenizer(
    tokenizer: transformers.PreTrainedTokenizerFast, words: list[str], folder: Path, record: dict, name: str
) -> None:
    """Save `tokenizer` with `words` appended to its WordPiece vocabulary (ids from len(tokenizer) on) as mlmtrain's
    tokenizer folder, atomically: WordPiece then matches each of them as one piece."""
    vocab = dict(extendable_vocab(tokenizer, name))
    vocab.update({word: len(vocab) + index for index, word in enumerate(words)})

    def write(staging: Path) -> None:
        save_tokenizer_files(tokenizer, staging)  # then the vocabulary, extended, in both of its files
        saved = json.loads((staging / "tokenizer.json").read_text(encoding="utf-8"))
        saved["model"]["vocab"] = vocab
        (staging / "tokenizer.json").write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
        _write_vocab(staging, vocab)
        (staging / TOKENIZER_META).write_text(json.dumps(record, indent=1), encoding="utf-8")

    _replace_tokenizer_folder(Path(folder), write)


def _replace_tokenizer_folder(folder: Path, write: Callable[[Path], None]) -> None:
    # Never replace something that is not ours: a mistyped tokenizer.path could name a run or a model folder.
    replace_folder(
        folder,
        write,
        marker=TOKENIZER_META,
        ours=TOKENIZER_FILES,
        topic="tokenizer",
        key="tokenizer.path",
        what="the tokenizer",
    )


def tokenizer_record(folder: Path) -> Optional[dict]:
    """What mlmtrain-tokenizer.json says about how the tokenizer in `folder` was made (None: no such file)."""
    try:
        return read_json(Path(folder) / TOKENIZER_META)
    except (OSError, ValueError):
        return None


def text_encoder(tokenizer: transformers.PreTrainedTokenizerBase) -> tokenizers.Tokenizer:
    """A copy of the tokenizer's Rust backend that encodes documents as text: `[MASK]` or `[SEP]` written in a corpus
    are characters like any others (`[`, `mask`, `]`), never a special token's id, which only mlmtrain puts in a block
    ([CLS], the [SEP] after each document, the masks it draws). No truncation or padding, whatever tokenizer.json
    says. A copy, so the tokenizer itself still reads a user's [MASK] in fill-mask and mask-demo as the mask."""
    backend = tokenizers.Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.encode_special_tokens = True
    backend.no_truncation()
    backend.no_padding()
    return backend


def is_tokenizer_folder(folder: Path) -> bool:
    """True when `folder` holds a tokenizer_config.json and tokenizer.json or vocab.txt."""
    folder = Path(folder)
    return (folder / _CONFIG_FILE).is_file() and any((folder / name).is_file() for name in _VOCAB_FILES)


def load_tokenizer(name_or_folder: Union[str, Path]) -> transformers.PreTrainedTokenizerFast:
    """A fast tokenizer from a local folder or a hub name, with a clear UserError when it cannot be had."""
    name = str(name_or_folder)
    path = Path(name).expanduser()
    if path.exists() or isinstance(name_or_folder, Path) or looks_like_path(name):
        if not path.is_dir():
            what = "is a file" if path.exists() else "does not exist"
            raise UserError("tokenizer", f"tokenizer folder {path} {what}; pass the folder written by `tokenize`")
        if not is_tokenizer_folder(path):
            missing = [] if (path / _CONFIG_FILE).is_file() else [_CONFIG_FILE]
            if not any((path / file_name).is_file() for file_name in _VOCAB_FILES):
                missing.append(" or ".join(_VOCAB_FILES))
            raise UserError(
                "tokenizer",
                f"{path} is not a tokenizer folder: it lacks {' and '.join(missing)}; "
                "run `mlmtrain tokenize` or pass another folder",
            )
        check_folder(path)  # before transformers, which would offer to run the folder's code
        source = str(path)
        unreachable = None
    else:
        source = name
        unreachable = hub_unreachable()  # then only the local cache can serve it, without a minute of retries
    try:
        tokenizer = from_pretrained(transformers.AutoTokenizer, source, local_files_only=unreachable is not None)
    except Exception as error:  # hub, network, json and tokenizers errors come in many types; all mean "cannot load"
        reason = first_line(error)
        if unreachable:
            reason = f"the Hugging Face Hub is unreachable ({unreachable}) and it is not in the local cache"
        raise UserError("tokenizer", f"cannot load tokenizer {name}: {reason}") from error
    if not getattr(tokenizer, "is_fast", False):
        raise UserError("tokenizer", f"tokenizer {name} is not a fast (Rust) tokenizer; use one with a tokenizer.json")
    roles = {"mask": "MLM masks with it", "pad": "unpacked blocks pad with it", "cls": "blocks open with it",
             "sep": "it closes blocks and separates documents"}  # fmt: skip
    missing = [f"{role} token ({why})" for role, why in roles.items() if getattr(tokenizer, f"{role}_token") is None]
    if missing:
        raise UserError(
            "tokenizer", f"tokenizer {name} has no {', no '.join(missing)}; use a BERT- or RoBERTa-style tokenizer"
        )
    # Some published tokenizer.json files switch on truncation (512) and batch padding. transformers resets both on
    # every call, but the token store and the live loader call the Rust backend directly, where they would cut long
    # documents and put [PAD] runs into the token stream.
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.backend_tokenizer.no_padding()
    return tokenizer


def tokenizer_fingerprint(tokenizer: Union[tokenizers.Tokenizer, transformers.PreTrainedTokenizerBase]) -> str:
    """16 hex digits of sha256 over the vocabulary in id order and the normalizer settings.

    Equal for a trained `tokenizers.Tokenizer` and the transformers tokenizer loaded from its saved folder.
    """
    backend = tokenizer if isinstance(tokenizer, tokenizers.Tokenizer) else tokenizer.backend_tokenizer
    vocab = backend.get_vocab(with_added_tokens=True)
    identity = {"vocab": sorted(vocab, key=vocab.__getitem__), "normalizer": _normalizer_settings(backend)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def folder_fingerprint(folder: Path) -> str:
    """`tokenizer_fingerprint` of the tokenizer saved in `folder`, read from its tokenizer.json alone where it has one
    (what a checkpoint mlmtrain wrote holds), else loaded."""
    path = Path(folder) / "tokenizer.json"
    try:
        return tokenizer_fingerprint(tokenizers.Tokenizer.from_file(str(path)))
    except Exception:  # no tokenizer.json, or one the tokenizers library cannot read: transformers says what is wrong
        return tokenizer_fingerprint(load_tokenizer(folder))


def same_tokenizer(first: Union[str, Path], second: Union[str, Path]) -> bool:
    """Whether the tokenizers of `first` and `second` (folders or hub names) split text alike: the same vocabulary in
    id order and normalizer. A tokenizer that does not load is not the same."""
    try:
        return tokenizer_fingerprint(load_tokenizer(first)) == tokenizer_fingerprint(load_tokenizer(second))
    except UserError:
        return False
