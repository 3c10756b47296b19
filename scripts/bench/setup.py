"""What every contestant shares: the sections and the recipes they race, the resolved options (`Setup`), and the
text, tokenizer and token store that `prepare` builds once for all of them."""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from mlmtrain.config import DataConfig, load_config
from mlmtrain.data.store import tokenize_corpus

REPO = Path(__file__).resolve().parents[2]


SECTIONS = (
    "throughput",
    "limit",
    "quality",
    "tuned",
    "recipe",
    "precision",
    "recipes",
    "growth",
    "downstream",
    "electra",
    "objectives",
    "adapt",
    "variants",
)


DEFAULT_SECTIONS = SECTIONS[
    :8
]  # downstream, electra, objectives, adapt pretrain for many minutes and fine-tune: when asked


LABELS = {
    "ours": "mlmtrain pretrain",
    "equal": "mlmtrain pretrain at the HF recipe's masking rate",
    "base": "the base encoder (not adapted)",
    "extend": "mlmtrain pretrain, tokenizer.extend_vocab",
    "hf": "HF Trainer recipe",
    "bare": "bare step (limit)",
    "untrained": "untrained (initial weights)",
    "electra": "mlmtrain pretrain, ELECTRA",
    "mlm": "mlmtrain pretrain, MLM",
    "nsp": "mlmtrain pretrain, MLM+NSP",
    "sop": "mlmtrain pretrain, MLM+SOP",
    "classic": "mlmtrain, classic BERT recipe",
    "fast": "mlmtrain, fast recipe",
}


# The recipes section races three recipes on the shipped config's model. The fast recipe (the shipped default of
# the CPU-sized configs since it won this race): no dropout (Cramming, ModernBERT), 40 % of the tokens masked with a
# fixed count per block (Wettig et al.; Cramming's fixed count), a WSD schedule (warm-up, constant, a decay over the
# last fifth: it beat Cramming's one-cycle triangle at mini, log of 2026-12-06).
# --fast-set KEY=VALUE changes it for a run (e.g. masking.mlm_probability=0.25, Cramming's rate).
FAST_RECIPE = {
    "model.dropout": 0.0,
    "masking.mlm_probability": 0.4,
    "masking.fixed_count": True,
    "optim.schedule": "wsd",
    "data.document_attention": "auto",  # within each document where the run can (NeoBERT; log of 2026-12-06)
}


# The electra and objectives sections' ELECTRA contestant: the shipped config's recipe, but the ELECTRA paper's 15 %
# of the tokens replaced. With the fast recipe's 40 %, the discriminator judged blocks of which 40 % were generator
# samples and stayed at the base rate for the whole budget (docs/benchmarks/log.md).
# --electra-set KEY=VALUE changes it for a run (e.g. masking.mlm_probability=0.4, electra.generator_size=0.5).
ELECTRA_RECIPE = {"masking.mlm_probability": 0.15}


HF_MLM_PROBABILITY = 0.15  # what run_mlm.py hands DataCollatorForLanguageModeling


# The classic BERT recipe it is judged against: dropout 0.1, 15 % of the tokens masked, linear decay.
CLASSIC_RECIPE = {
    "model.dropout": 0.1,
    "masking.mlm_probability": 0.15,
    "masking.fixed_count": False,
    "optim.schedule": "linear",
    "data.document_attention": "packed",
}


class BenchmarkError(Exception):
    """A benchmark that cannot run or whose contestant failed; main prints it as one line."""


@dataclass
class Setup:
    """The resolved options and the data both sides read: one tokenizer and token store, one text file."""

    args: argparse.Namespace
    device: str
    precision: str  # ours: train.precision (auto unless --precision)
    hf_precision: str  # the HF recipe's: bf16 on CUDA (its --bf16), else fp32 (its default), unless --precision
    train_text: Path
    valid_text: Path
    data_dir: Path  # tokenizer/ and tokens/, built once by `tokenize`

    @property
    def work_dir(self) -> Path:
        return Path(self.args.work_dir)

    def config_path(self, size: Optional[str] = None) -> Path:
        return REPO / "configs" / f"{size or self.args.size}.yaml"

    def run_dir(self, name: str) -> Path:
        return self.work_dir / "runs" / name

    def overrides(self, run_dir: Path, seq_len: Optional[int] = None, extra: Optional[dict] = None) -> list[str]:
        """--set options every contestant shares (the HF side reads the same config for sizes and data)."""
        values: dict[str, Any] = {
            "data.train": self.train_text,
            "data.validation": self.valid_text,
            "tokenizer.path": self.data_dir / "tokenizer",
            "data.store": self.data_dir / "tokens",
            "tokenizer.vocab_size": self.args.vocab_size,
            "data.seq_len": seq_len or self.args.seq_len,
            "train.batch_size": self.args.batch,
            "train.precision": self.precision,
            "train.device": self.device,
            "train.seed": 0,
            "train.run_dir": run_dir,
            "train.progress": False,
            "train.eval_max_blocks": self.args.eval_blocks,
            "checkpoint.save_every": 0,  # one checkpoint, after the last step (outside the timed window)
            "checkpoint.keep_last": 1,
        }
        values.update(extra or {})
        return self.overrides_of(values)

    @staticmethod
    def overrides_of(values: dict[str, Any]) -> list[str]:
        """KEY=VALUE --set options, in order."""
        return [f"{key}={_yaml_scalar(value)}" for key, value in values.items()]

    def hf(self, run_dir: Path, extra: Optional[dict] = None) -> list[str]:
        """The HF side's overrides: the shared ones at the HF recipe's own precision and dropout (BertConfig's
        0.1, which run_mlm.py keeps, whatever our config's recipe says)."""
        own = {"train.precision": self.hf_precision, "model.dropout": CLASSIC_RECIPE["model.dropout"]}
        return self.overrides(run_dir, extra={**own, **(extra or {})})

    def ours(self, run_dir: Path, seq_len: Optional[int] = None, extra: Optional[dict] = None) -> list[str]:
        """Our side's overrides: the shared ones, then the pass-through --set options (compile, vocab padding...)."""
        return self.overrides(run_dir, seq_len, extra) + list(self.args.set)


def with_changes(recipe: dict[str, Any], changes: list[str]) -> dict[str, Any]:
    """A recipe with a run's KEY=VALUE changes (--fast-set, --electra-set) on top."""
    return recipe | dict(item.split("=", 1) for item in changes)


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def default_valid(train: str) -> Optional[str]:
    """valid.txt beside a training file, when there is one; else None (hold out a share of the training text)."""
    sibling = Path(train).parent / "valid.txt"
    return str(sibling) if Path(train).is_file() and sibling.is_file() else None


def text_files(train: str, valid: Optional[str], work_dir: Path) -> tuple[Path, Path]:
    """Plain text, one document a line, that both sides train on (the HF recipe reads it with load_dataset("text")).

    A .txt training file with a validation source is used as it is; anything else (builtin:python-docs, a
    held-out share of the training documents, other formats) is written out once under the work dir.
    """
    if valid is not None and train.endswith(".txt") and Path(train).is_file():
        return Path(train).resolve(), Path(valid).resolve()
    from mlmtrain.data.sources import corpus_splits

    train_corpus, valid_corpus = corpus_splits(DataConfig(train=train, validation=valid))
    folder = work_dir / f"text-{train_corpus.fingerprint()}"
    if not (folder / "COMPLETE").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for name, corpus in (("train.txt", train_corpus), ("valid.txt", valid_corpus)):
            with open(folder / name, "w", encoding="utf-8") as out:
                out.writelines(" ".join(text.split()) + "\n" for text in corpus)  # one line per document
        (folder / "COMPLETE").write_text("ok\n")
    return (folder / "train.txt").resolve(), (folder / "valid.txt").resolve()


def prepare(args: argparse.Namespace) -> Setup:
    """Resolve device and data, then tokenize once: every contestant finds the tokenizer and store up to date."""
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BenchmarkError(f"--device {device}, but this torch sees no GPU; use --device cpu (or auto)")
    hf_precision = args.precision or ("bf16" if device.startswith("cuda") else "fp32")
    hf_precision = "fp32" if hf_precision == "bf16-head" else hf_precision  # the HF recipe has no head-only autocast
    work_dir = Path(args.work_dir)
    train_text, valid_text = text_files(args.train, args.valid, work_dir)
    digest = hashlib.blake2b(f"{train_text}\n{valid_text}".encode(), digest_size=4).hexdigest()
    data_dir = work_dir / f"data-v{args.vocab_size}-{digest}"
    setup = Setup(args, device, args.precision or "auto", hf_precision, train_text, valid_text, data_dir)
    tokenize_corpus(load_config(setup.config_path(), setup.overrides(setup.run_dir("tokenize"))), quiet=True)
    return setup
