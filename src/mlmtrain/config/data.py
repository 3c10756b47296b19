"""The data, tokenizer and masking sections: where the text comes from and how blocks are cut, the tokenizer that
encodes it, and how a block's tokens are selected for prediction."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Optional, Union

from mlmtrain.config.fields import (
    SOME_SOURCE,
    Source,
    TrainSource,
    above,
    at_least,
    quiet,
    require,
    trains,
    within,
)
from mlmtrain.config.urls import default_cache_dir, local_path


@dataclass
class DataConfig:
    train: TrainSource = trains(
        "builtin:python-docs",
        "training text: a path, glob, folder or URL (s3://, gs://, hf://, file://) or a list of them (.txt .jsonl "
        ".json .parquet .csv), 'mds:PATH_OR_URL' (a MosaicML Streaming dataset), 'builtin:python-docs', "
        "'builtin:python-docstrings', or 'hf:NAME[/CONFIG]:SPLIT'; or a mixture: a list of {source: SOURCE, "
        "weight: W, name: NAME}, each step's blocks drawn from the sources in proportion to their weights",
        check=SOME_SOURCE,
        path="local",
    )
    mixture_temperature: Union[float, None] = trains(
        None,
        "with a mixture in data.train: draw source i in proportion to (its tokens)^t instead of the weights (mmBERT's "
        "rule: 1 keeps the sizes' shares, lower values flatten them toward equal); null: the weights",
        check=within(0, 1, "(]"),
    )
    validation: Union[Source, None] = trains(
        None,
        "validation text (same forms as train); null splits validation_fraction off train",
        path="local",
    )
    validation_fraction: float = trains(
        0.05,
        "share of training documents held out for validation when validation is null",
        check=within(0, 1, "[)"),
    )
    text_field: str = trains("text", "column / JSON key that holds the text in .jsonl .json .parquet .csv and hub data")
    txt_documents: Literal["line", "paragraph"] = trains(
        "line", "how a .txt file splits into documents: one per line, or blank-line-separated paragraphs"
    )
    seq_len: int = trains(128, "tokens per training block, [CLS] and [SEP] included", check=at_least(8))
    packing: bool = trains(
        True, "concatenate documents into full blocks (no padding); false: one document per block, padded"
    )
    document_attention: Literal["packed", "within", "auto"] = trains(
        "packed",
        "packed: every token of a packed block attends to the whole block; within: only to its own document, whose "
        "positions start at 0 (BERT, RoBERTa and ModernBERT, train.objective mlm, data.packing true); auto: within "
        "where the run can, else packed",
    )
    store: Union[str, None] = quiet(
        None,
        "token store folder written by `tokenize`, or a URL (s3://, gs://, hf://) read through data.cache_dir; "
        "null: <run_dir>/tokens",
        path="local",
    )
    tokenize_workers: Union[int, None] = quiet(
        None,
        "processes that encode the corpus, one tokenizer each (the store is the same whatever the count); null: the "
        "cores this process may use (under torchrun, shared among the machine's processes)",
        check=at_least(1),
    )
    cache_dir: Union[str, None] = quiet(
        None,
        "local folder that keeps copies of remote stores, tokenizers and MDS shards; null: $XDG_CACHE_HOME/mlmtrain "
        "(~/.cache/mlmtrain)",
        path="local",
    )
    cache_max_gb: float = quiet(
        100.0,
        "size bound of data.cache_dir in GB: the least recently used copies not needed now are evicted to stay under "
        "it",
        check=above(0),
    )
    use_store: bool = trains(
        True, "read pre-tokenized blocks from the store; false: tokenize a live stream in the loader workers"
    )
    num_workers: int = quiet(1, "DataLoader worker processes that cut blocks and draw masks", check=at_least(0))
    shuffle_buffer: int = trains(
        10000, "blocks held for shuffling a live stream (the store shuffles exactly)", check=at_least(1)
    )

    def cache_folder(self) -> Path:
        """Where copies of remote stores, tokenizers and MDS shards are kept (cache_dir, or the user's cache)."""
        return Path(local_path(self.cache_dir)).expanduser() if self.cache_dir else default_cache_dir()

    def validate(self) -> None:
        mixture = mixture_of(self.train)
        require(
            self.mixture_temperature is None or mixture is not None,
            "data.mixture_temperature",
            "samples the sources of a mixture, and data.train is one source; write data.train as a list of "
            "{source: ..., weight: ...}, or drop data.mixture_temperature",
        )
        if mixture is None:
            return
        require(
            self.use_store,
            "data.train",
            "is a mixture, which draws blocks from each source's tokens in the store; set data.use_store: true",
        )
        require(
            self.packing,
            "data.train",
            "is a mixture, which draws packed blocks (its shares count tokens); set data.packing: true",
        )


@dataclass(frozen=True)
class MixtureSource:
    """One source of a data mixture: its name in metrics and reports, what it reads, its weight."""

    name: str
    source: Source
    weight: float


_MIXTURE_KEYS = ("source", "weight", "name")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def mixture_of(train: TrainSource) -> Optional[list[MixtureSource]]:
    """data.train's weighted sources when it is a mixture (a list of {source, weight, name} mappings), else None;
    UserError naming the entry and what works for an entry that is not one."""
    if not isinstance(train, list) or not any(isinstance(entry, dict) for entry in train):
        return None
    entries = [_mixture_source(index, entry) for index, entry in enumerate(train)]
    names = [entry.name for entry in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    require(
        not twice,
        "data.train",
        f"names the source {twice[0] if twice else ''} twice in its mixture; give each entry a name: of its own",
    )
    return entries


def _mixture_source(index: int, entry: Any) -> MixtureSource:
    where = f"data.train[{index}]"
    require(
        isinstance(entry, dict),
        where,
        f"is {entry!r:.80}, and the other entries are {{source, weight}} mappings; write every entry of a mixture as "
        "{source: PATH, weight: W}",
    )
    unknown = sorted(str(key) for key in entry if key not in _MIXTURE_KEYS)
    require(not unknown, where, f"has the key {unknown[0] if unknown else ''}; an entry takes source, weight and name")
    source = entry.get("source")
    require(
        (isinstance(source, str) and bool(source.strip()))
        or (isinstance(source, list) and bool(source) and all(isinstance(s, str) and s.strip() for s in source)),
        f"{where}.source",
        "must name a source (a path, glob, folder, URL, hf: or builtin: source, or a list of them)",
    )
    weight = entry.get("weight", 1.0)
    require(
        isinstance(weight, (int, float)) and not isinstance(weight, bool) and math.isfinite(weight) and weight > 0,
        f"{where}.weight",
        f"must be a finite number > 0 (got {weight!r:.40}); a source to leave out is an entry to drop",
    )
    name = entry.get("name", _source_name(source))
    require(
        isinstance(name, str) and bool(_NAME.fullmatch(name)),
        f"{where}.name",
        f"must be letters, digits and _ . + - (got {name!r:.40})",
    )
    return MixtureSource(name, source, float(weight))


def _source_name(source: Source) -> str:
    """A mixture source's default name: its file or folder name without the extension (`wiki.train` of
    `data/wiki.train.txt`), the dataset of an hf: source; a list is named by its first entry."""
    first = source[0] if isinstance(source, list) else source
    bare = re.sub(r"^(builtin|hf|mds):", "", first.strip()).split(":")[0]
    name = PurePosixPath(bare.rstrip("/*")).name or bare
    for suffix in (".gz", ".txt", ".jsonl", ".json", ".parquet", ".csv"):
        name = name.removesuffix(suffix)
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name).strip("_.+-") or "source"


def train_specs(train: TrainSource) -> list[str]:
    """Every source data.train reads, a mixture's included, as a flat list."""
    mixture = mixture_of(train)
    if mixture is None:
        return [train] if isinstance(train, str) else list(train)
    return [spec for entry in mixture for spec in ([entry.source] if isinstance(entry.source, str) else entry.source)]


@dataclass
class TokenizerConfig:
    path: Union[str, None] = quiet(
        None,
        "tokenizer folder (written by `tokenize`, read by `pretrain`), or a URL read through data.cache_dir; null: "
        "<run_dir>/tokenizer",
        path="local",
    )
    pretrained: Union[str, None] = trains(
        None,
        "reuse this existing tokenizer folder or hub name instead of training one",
        path="hub",
    )
    kind: Literal["wordpiece", "bpe"] = trains(
        "wordpiece",
        "the tokenizer `tokenize` trains: wordpiece (BERT's, '##' inside words) or bpe (byte-level BPE, 'Ġ' before "
        "words, no unknown characters); both with the specials [CLS] [SEP] [PAD] [MASK] [UNK]",
    )
    vocab_size: int = trains(30522, "vocabulary size, special tokens included", check=at_least(16))
    lowercase: bool = trains(True, "lower-case text before tokenizing")
    strip_accents: Union[bool, None] = trains(None, "strip accents; null: follow lowercase, as BERT does")
    min_frequency: int = trains(2, "a merge must occur this often to enter the vocabulary", check=at_least(1))
    limit_alphabet: int = trains(
        1000,
        "at most this many distinct characters in the initial alphabet (wordpiece; refused with bpe, which starts "
        "from the 256 bytes)",
        check=at_least(1),
    )
    train_sample_bytes: int = trains(
        1_000_000_000,
        "at most this many bytes of text train the tokenizer, each input file giving its share from its start (the "
        "whole corpus is still encoded)",
        check=at_least(1_000),
    )
    extend_vocab: int = trains(
        0,
        "with model.init_from: add up to this many whole words frequent in data.train that the base's tokenizer "
        "splits into several pieces, each new embedding row the mean of its pieces' rows; 0: none",
        check=at_least(0),
    )


@dataclass
class MaskingConfig:
    mlm_probability: float = trains(0.15, "share of ordinary tokens selected for prediction", check=within(0, 1, "()"))
    mask_replace: float = trains(0.8, "share of selected tokens replaced by [MASK]", check=within(0, 1, "[]"))
    random_replace: float = trains(
        0.1, "share of selected tokens replaced by a random ordinary token", check=within(0, 1, "[]")
    )
    whole_word: bool = trains(False, "select all pieces of a word together (WordPiece, byte-level BPE, SentencePiece)")
    fixed_count: bool = trains(
        False,
        "select exactly round(rate x maskable tokens) per block instead of a coin per token; with packing the inner "
        "[SEP]s are not maskable, so the count varies a little between blocks (shapes are not fully static)",
    )
    schedule: Literal["constant", "linear", "cosine"] = trains(
        "constant",
        "how the training rate moves from mlm_probability to mlm_probability_end over train.max_steps (evaluations "
        "keep eval_mlm_probability)",
    )
    mlm_probability_end: Union[float, None] = trains(
        None,
        "with a linear or cosine masking.schedule: the rate of the last step; null: no schedule",
        check=within(0, 1, "()"),
    )
    eval_seed: int = quiet(1234, "seed of the fixed evaluation masks")
    eval_mlm_probability: float = quiet(
        0.15,
        "share of ordinary tokens evaluations mask, 80/10/10 and a coin per token, whatever the training masking "
        "above: perplexities stay comparable across recipes",
        check=within(0, 1, "()"),
    )

    def validate(self) -> None:
        scheduled = self.schedule != "constant"
        require(
            scheduled == (self.mlm_probability_end is not None),
            "masking.mlm_probability_end",
            "is set but masking.schedule is constant; set masking.schedule: linear or cosine, or drop "
            "masking.mlm_probability_end"
            if not scheduled
            else f"is null but masking.schedule is {self.schedule}; set it to the rate of the last step (e.g. 0.15)",
        )
        require(
            self.mask_replace + self.random_replace <= 1.0 + 1e-9,
            "masking.mask_replace",
            f"+ masking.random_replace must be <= 1 (got {self.mask_replace} + {self.random_replace})",
        )
