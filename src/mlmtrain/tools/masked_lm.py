"""`eval-perplexity` and `fill-mask` on a masked-LM folder (of an ELECTRA checkpoint: its generator): the arguments
checked, the model loaded, the results returned; the scoring itself is `evaluate.perplexity`'s."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from mlmtrain.config import read_yaml
from mlmtrain.data.masking import evaluation_masking
from mlmtrain.data.sources import corpus_splits, open_corpus
from mlmtrain.errors import UserError
from mlmtrain.evaluate.perplexity import (
    DEFAULT_SEQ_LEN,
    EvalResult,
    check_checkpoint_folder,
    evaluate_texts,
    load_masked_lm,
)
from mlmtrain.model.context import quiet_transformers
from mlmtrain.model.electra import GENERATOR_DIR, generator_folder
from mlmtrain.model.families import check_within_documents, family_of, model_positions
from mlmtrain.tools.arguments import check_count, device_option, training_config
from mlmtrain.train.precision import resolve_precision


def _saved_config(folder: Path) -> Optional[Path]:
    """The mlmtrain.yaml that describes the model in `folder`: its own, or for the `generator/` of an ELECTRA
    checkpoint the one beside the discriminator, so the generator is scored as its whole checkpoint is."""
    if (folder / "mlmtrain.yaml").is_file():
        return folder / "mlmtrain.yaml"
    folder = folder.absolute()
    # with generator/config.json there, generator_folder answers (it raises only for a discriminator without one)
    if folder.name == GENERATOR_DIR and (folder / "config.json").is_file() and generator_folder(folder.parent):
        saved = folder.parent / "mlmtrain.yaml"
        return saved if saved.is_file() else None
    return None


def _saved_data_setting(saved: Optional[Path], key: str) -> Any:
    """data.`key` of a saved mlmtrain.yaml, as it is written there (None when there is none)."""
    if saved is None:
        return None
    settings = read_yaml(saved)
    data = settings.get("data") if isinstance(settings, dict) else None  # a damaged file: the defaults
    return data.get(key) if isinstance(data, dict) else None


def _checkpoint_seq_len(saved: Optional[Path]) -> Optional[int]:
    """data.seq_len of a saved mlmtrain.yaml (None when there is none)."""
    value = _saved_data_setting(saved, "seq_len")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _within_documents(cfg: Any, saved: Optional[Path]) -> bool:
    """Whether tokens attend within their own documents: as data.document_attention of the config (or --set) says
    when it states packed or within, else (auto, or unstated) as the model trained (its saved mlmtrain.yaml), else
    not (packed)."""
    if "data.document_attention" in cfg.stated and cfg.data.document_attention != "auto":
        return cfg.data.document_attention == "within"
    return _saved_data_setting(saved, "document_attention") == "within"


def masked_lm_folder(folder: Path) -> Path:
    """`folder`, or the generator of an ELECTRA checkpoint folder (said in one line on stderr)."""
    generator = generator_folder(folder)
    if generator is None:
        return folder
    print(f"{folder} is an ELECTRA checkpoint: using its generator {generator} as the masked LM", file=sys.stderr)
    return generator


@dataclass(frozen=True)
class Evaluation:
    """What eval-perplexity measured, and on what: the folder scored, the source named, the blocks and masks."""

    result: EvalResult
    model: Path  # the masked-LM folder scored (of an ELECTRA checkpoint: its generator)
    source: str  # the --data source, or which config's validation split
    seq_len: int
    seed: int
    pseudo: bool
    document_attention: str = "packed"  # data.document_attention: packed, or within each document

    def report(self) -> dict[str, Any]:
        """The result and its settings, as `--json` prints them."""
        report = {**self.result.as_dict(), "model": str(self.model), "seq_len": self.seq_len, "seed": self.seed}
        report["mode"] = "pseudo" if self.pseudo else "mlm"
        report["document_attention"] = self.document_attention
        return report


def evaluate_perplexity(
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
) -> Evaluation:
    """Perplexity of a masked-LM folder on `data` (or the validation split of `config`), with fixed masks."""
    if data is None and config is None:
        raise UserError("argument", "say what to evaluate on: --data SOURCE, or --config C for its validation split")
    for value, flag in ((batch_size, "--batch-size"), (max_blocks, "--max-blocks"), (max_tokens, "--max-tokens")):
        check_count(value, flag)
    if max_tokens is not None and not pseudo:
        raise UserError("argument", "--max-tokens caps --pseudo; for masked-LM perplexity use --max-blocks")
    cfg = training_config(config, overrides if isinstance(overrides, dict) else list(overrides))
    checkpoint = Path(model)
    folder = masked_lm_folder(checkpoint)
    check_checkpoint_folder(folder)  # before the slow parts, so a mistyped path fails at once
    if data is not None:
        corpus, source = open_corpus(data, cfg.data, key="--data"), data
    else:
        corpus, source = corpus_splits(cfg.data)[1], f"the validation split of {config}"
    seq_len_from = "--seq-len"
    if seq_len is None and "data.seq_len" in cfg.stated:  # the config's blocks: models compared on the same
        seq_len, seq_len_from = cfg.data.seq_len, f"data.seq_len of {config}" if config else "data.seq_len"
    saved = _saved_config(checkpoint)
    if seq_len is None:
        seq_len, seq_len_from = _checkpoint_seq_len(saved), f"data.seq_len of {saved}"
    if seq_len is None:
        seq_len, seq_len_from = DEFAULT_SEQ_LEN, "the default --seq-len"
    if seq_len < 8:
        raise UserError("argument", f"{seq_len_from} must be >= 8 (got {seq_len}); pass --seq-len 8 or more")
    torch_device = device_option(device)
    mlm, tokenizer = load_masked_lm(folder)
    positions = model_positions(mlm.config)
    if positions is not None and seq_len > positions:
        raise UserError(
            "argument",
            f"{seq_len_from} is {seq_len}, beyond the model's {positions} positions (max_position_embeddings); "
            f"pass --seq-len {positions} or less",
        )
    within = _within_documents(cfg, saved)  # the attention the model trained with, unless the config says
    if within:
        check_within_documents(family_of(mlm.config.model_type), f"the {mlm.config.model_type} model in {folder}")
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
        documents=within,
    )
    return Evaluation(result, folder, source, seq_len, seed, pseudo, "within" if within else "packed")


def fill_mask(
    model: Union[str, Path], texts: Iterable[str], top_k: int, device: str
) -> Iterator[tuple[str, list[list[dict[str, Any]]]]]:
    """(text, one list of the pipeline's top-k candidates per mask) for each text, after checking it fits."""
    from transformers import pipeline  # transformers: heavy, loaded on use

    check_count(top_k, "--top-k")
    torch_device = device_option(device)
    mlm, tokenizer = load_masked_lm(masked_lm_folder(Path(model)))
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
