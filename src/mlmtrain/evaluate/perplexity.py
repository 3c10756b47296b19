"""MLM perplexity with fixed masks (training-time evaluation and `mlmtrain eval-perplexity`), pseudo-perplexity,
and loading a masked-LM folder for the commands.

Masks come from the collator seeded with the evaluation seed and each block's index, so two evaluations
of one model agree to the last digit and two models with one tokenizer see the same masked positions.
Perplexity = exp(total NLL over masked tokens / masked tokens), summed in float64 (token-weighted).
The commands take any Hugging Face masked-LM folder, stream the text into packed blocks exactly as training
cuts them, and score them a chunk at a time, so memory stays bounded whatever the corpus size.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F

from mlmtrain.config import MaskingConfig
from mlmtrain.data.blocks import pack_blocks
from mlmtrain.data.masking import IGNORE_INDEX, MaskingCollator, VocabInfo, document_ids
from mlmtrain.data.tokenizer import is_tokenizer_folder, load_tokenizer, text_encoder
from mlmtrain.errors import UserError, first_line
from mlmtrain.evaluate.stats import ratio_interval
from mlmtrain.model.context import autocast_context, eval_mode, quiet_transformers
from mlmtrain.model.families import encode, family_of, head_logits
from mlmtrain.runtime.model_folder import from_pretrained, model_config
from mlmtrain.runtime.progress import progress_bar

DEFAULT_SEQ_LEN = 128  # block length when neither --seq-len, the config, nor the checkpoint's mlmtrain.yaml says
_ENCODE_DOCUMENTS = 256  # documents per tokenizer call: amortizes the call, keeps the pending text small
_CHUNK_BATCHES = 32  # forward passes' worth of blocks held at once while streaming
_WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)


@dataclass
class EvalResult:
    loss: float
    perplexity: float
    tokens: int
    masked_tokens: int
    accuracy: float  # top-1: share of masked tokens whose most likely prediction is the original
    ci95: tuple[float, float]
    seconds: float
    blocks: int

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci95"] = list(self.ci95)
        return out


def per_row_nll(
    mlm: Any,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    document_ids: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(NLL sum, masked count, correct top-1 count) per row; NLL in float64. A model of a family mlmtrain continues
    (families.py) runs its head on the masked rows only; with `document_ids`, each token attends within its own
    document (such a family's only: `check_within_documents`)."""
    selected = labels != IGNORE_INDEX
    rows = selected.nonzero()[:, 0]
    if family_of(mlm.config.model_type) is not None:
        logits = head_logits(mlm, encode(mlm, input_ids, attention_mask, document_ids)[selected])
    else:  # any other masked LM: full logits, then keep the masked positions
        logits = mlm(input_ids=input_ids, attention_mask=attention_mask).logits[selected]
    nll = F.cross_entropy(logits.float(), labels[selected], reduction="none").double()
    sums = torch.zeros(len(input_ids), dtype=torch.float64, device=nll.device).index_add_(0, rows, nll)
    hits = (logits.argmax(dim=-1) == labels[selected]).long()
    correct = torch.zeros(len(input_ids), dtype=torch.long, device=nll.device).index_add_(0, rows, hits)
    return sums, selected.sum(dim=1), correct


def confidence_interval(block_nll: np.ndarray, block_counts: np.ndarray) -> tuple[float, float]:
    """95 % interval of perplexity: normal approximation of the ratio estimator over blocks."""
    keep = block_counts > 0  # a block with no masked token says nothing about the loss
    low, high = ratio_interval(block_nll[keep], block_counts[keep].astype(np.float64))
    return (math.exp(low), math.exp(high))


@dataclass
class BlockScores:
    """Per-block NLL sums (float64) and scored-token counts, gathered chunk by chunk: all that the perplexity and
    its interval need (16 bytes a block, so even a huge corpus keeps this small)."""

    nll: list[np.ndarray] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)
    correct: int = 0
    tokens: int = 0
    blocks: int = 0

    def add(self, nll: np.ndarray, counts: np.ndarray, correct: int, tokens: int) -> None:
        self.nll.append(np.asarray(nll, dtype=np.float64))
        self.counts.append(np.asarray(counts, dtype=np.int64))
        self.correct += correct
        self.tokens += tokens
        self.blocks += len(nll)

    def result(self, seconds: float) -> EvalResult:
        nll_all = np.concatenate(self.nll) if self.nll else np.zeros(0)
        counts_all = np.concatenate(self.counts) if self.counts else np.zeros(0, dtype=np.int64)
        masked = int(counts_all.sum())
        loss = float(nll_all.sum() / masked) if masked else float("nan")
        return EvalResult(
            loss=loss,
            perplexity=math.exp(loss) if masked else float("nan"),
            tokens=self.tokens,
            masked_tokens=masked,
            accuracy=self.correct / masked if masked else float("nan"),
            ci95=confidence_interval(nll_all, counts_all),
            seconds=seconds,
            blocks=self.blocks,
        )


@torch.no_grad()
def score_blocks(
    scores: BlockScores,
    mlm: Any,
    blocks: Union[Sequence[np.ndarray], Mapping[int, np.ndarray]],
    indices: Sequence[int],
    vocab: VocabInfo,
    masking: MaskingConfig,
    seed: int,
    batch_size: int,
    device: torch.device,
    autocast_dtype: Optional[torch.dtype] = None,
    progress: Any = None,
    documents: bool = False,
) -> None:
    """Add the masked-LM NLL of blocks[i], for i in `indices`, to `scores`; block i is masked as block i of epoch 0.
    `documents`: each token attends within its own document (data.document_attention within)."""
    collator = MaskingCollator(vocab, masking, seed=seed, documents=documents)
    with eval_mode(mlm):
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            batch = collator([{"input_ids": blocks[i], "epoch": 0, "index": int(i)} for i in chunk])
            batch = {k: v.to(device) for k, v in batch.items()}
            with autocast_context(device, autocast_dtype):
                nll, counts, correct = per_row_nll(
                    mlm, batch["input_ids"], batch["labels"], batch.get("attention_mask"), batch.get("document_ids")
                )
            mask = batch.get("attention_mask")
            tokens = int(mask.sum()) if mask is not None else batch["input_ids"].numel()
            scores.add(nll.cpu().numpy(), counts.cpu().numpy(), int(correct.sum()), tokens)
            if progress is not None:
                progress.update(len(chunk))


def evaluate_blocks(
    mlm: Any,
    blocks: Union[Sequence[np.ndarray], Mapping[int, np.ndarray]],
    indices: Sequence[int],
    vocab: VocabInfo,
    masking: MaskingConfig,
    seed: int,
    batch_size: int,
    device: torch.device,
    autocast_dtype: Optional[torch.dtype] = None,
    progress: Any = None,
    documents: bool = False,
) -> EvalResult:
    """Masked-LM loss and perplexity of `mlm` on blocks[i] for i in `indices`, with fixed masks (`documents`: each
    token attending within its own document)."""
    started = time.perf_counter()
    scores = BlockScores()
    score_blocks(
        scores, mlm, blocks, indices, vocab, masking, seed, batch_size, device, autocast_dtype, progress, documents
    )
    return scores.result(time.perf_counter() - started)


@torch.no_grad()
def score_pseudo(
    scores: BlockScores,
    mlm: Any,
    block: np.ndarray,
    vocab: VocabInfo,
    batch_size: int,
    device: torch.device,
    autocast_dtype: Optional[torch.dtype] = None,
    max_positions: Optional[int] = None,
    documents: bool = False,
) -> int:
    """Add one block's pseudo-log-likelihood (Salazar et al. 2020) to `scores`: each ordinary token is masked alone,
    in its own copy of the block, `batch_size` copies per forward pass. Scores the first `max_positions` ordinary
    tokens when given; returns how many were scored. `documents`: each token attends within its own document."""
    ids = torch.as_tensor(block, dtype=torch.long, device=device)
    within = document_ids(ids[None], vocab.sep_id) if documents else None
    special = torch.tensor((vocab.mask_id, vocab.pad_id, *vocab.special_ids), device=device)
    positions = (~torch.isin(ids, special)).nonzero().squeeze(1)[:max_positions]
    total = torch.zeros((), dtype=torch.float64, device=device)
    correct = 0
    with eval_mode(mlm):
        for start in range(0, len(positions), batch_size):
            chunk = positions[start : start + batch_size]
            rows = torch.arange(len(chunk), device=device)
            copies = ids.repeat(len(chunk), 1)
            copies[rows, chunk] = vocab.mask_id
            labels = torch.full_like(copies, IGNORE_INDEX)
            labels[rows, chunk] = ids[chunk]
            documents_of = within.expand(len(chunk), -1) if within is not None else None
            with autocast_context(device, autocast_dtype):
                nll, _, hits = per_row_nll(mlm, copies, labels, None, documents_of)
            total += nll.sum()
            correct += int(hits.sum())
    scores.add(np.array([total.item()]), np.array([len(positions)]), correct, len(block))
    return len(positions)


# ---------------------------------------------------------------------------------------------
# Streaming text into blocks


class PackedBlocks:
    """Blocks of `seq_len` from a stream of texts, cut exactly as training cuts its token store (`pack_blocks`),
    with the model's own tokenizer. Counts documents and tokens as it goes."""

    def __init__(self, texts: Iterable[str], tokenizer: Any, seq_len: int) -> None:
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
            raise UserError("tokenizer", "the tokenizer has no [CLS] or no [SEP] token, which packed blocks need")
        self.texts, self.tokenizer, self.seq_len = texts, tokenizer, seq_len
        self.encoder = text_encoder(tokenizer)  # as the token store encodes: [MASK] written in the text is text
        self.documents = 0
        self.tokens = 0

    def __iter__(self) -> Iterator[np.ndarray]:
        yield from pack_blocks(self._encoded(), self.seq_len, self.tokenizer.cls_token_id, self.tokenizer.sep_token_id)

    def _encoded(self) -> Iterator[list[list[int]]]:
        documents = iter(self.texts)
        while batch := list(itertools.islice(documents, _ENCODE_DOCUMENTS)):
            encoded = [encoding.ids for encoding in self.encoder.encode_batch(batch, add_special_tokens=False)]
            self.documents += len(batch)
            self.tokens += sum(len(ids) + 1 for ids in encoded)
            yield encoded


def _non_empty(blocks: PackedBlocks, source: str) -> Iterator[np.ndarray]:
    """The blocks, or a UserError before anything is scored when the text does not fill one."""
    stream = iter(blocks)
    first = next(stream, None)
    if first is None:
        if blocks.documents == 0:
            raise UserError("data", f"{source} holds no text; add text or choose another source")
        raise UserError(
            "data",
            f"{source} has {blocks.tokens} tokens, fewer than one block of {blocks.seq_len}; "
            "add text or lower --seq-len",
        )
    return itertools.chain([first], stream)


def evaluate_texts(
    mlm: Any,
    tokenizer: Any,
    texts: Iterable[str],
    seq_len: int,
    masking: MaskingConfig,
    seed: int,
    batch_size: int,
    device: torch.device,
    autocast_dtype: Optional[torch.dtype] = None,
    max_blocks: Optional[int] = None,
    pseudo: bool = False,
    max_tokens: Optional[int] = None,
    source: str = "the text",
    progress: bool = False,
    documents: bool = False,
) -> EvalResult:
    """MLM perplexity (or, with `pseudo`, pseudo-perplexity) of `mlm` on documents streamed into packed blocks.

    Block i of the stream is masked as block i of epoch 0 with `seed`. Blocks are built and scored a chunk at a
    time, whole forward passes per chunk, so the result equals scoring all blocks at once, bit for bit. `documents`:
    each token attends within its own document of the block (data.document_attention within).
    """
    started = time.perf_counter()
    vocab = VocabInfo.from_tokenizer(tokenizer)
    blocks = _non_empty(PackedBlocks(texts, tokenizer, seq_len), source)
    if max_blocks is not None:
        blocks = itertools.islice(blocks, max_blocks)
    scores = BlockScores()
    # created after the first block exists, so a data error leaves stderr with its one line
    bar = progress_bar(
        max_tokens if pseudo else max_blocks, "token" if pseudo else "block", "score", disable=not progress, leave=False
    )
    with bar:
        if pseudo:
            left = max_tokens
            for block in blocks:
                scored = score_pseudo(scores, mlm, block, vocab, batch_size, device, autocast_dtype, left, documents)
                bar.update(scored)
                if left is not None:
                    left -= scored
                    if left <= 0:
                        break
        else:
            first_index = 0
            while chunk := list(itertools.islice(blocks, batch_size * _CHUNK_BATCHES)):
                window = dict(enumerate(chunk, first_index))
                score_blocks(
                    scores,
                    mlm,
                    window,
                    list(window),
                    vocab,
                    masking,
                    seed,
                    batch_size,
                    device,
                    autocast_dtype,
                    bar,
                    documents,
                )
                first_index += len(chunk)
    return scores.result(time.perf_counter() - started)


# ---------------------------------------------------------------------------------------------
# Loading a checkpoint written by anyone


def check_checkpoint_folder(folder: Path) -> None:
    """A UserError naming every file a masked-LM checkpoint folder lacks (before transformers tries to load it)."""
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise UserError("model", f"{folder} {what}; pass a masked-LM checkpoint folder to --model")
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    if not any((folder / name).is_file() for name in _WEIGHT_FILES):
        missing.append("weights (model.safetensors or pytorch_model.bin)")
    if not is_tokenizer_folder(folder):
        missing.append("tokenizer files (tokenizer_config.json with tokenizer.json or vocab.txt)")
    if missing:
        latest = folder / "checkpoints" / "latest"  # a run folder rather than one of its checkpoints
        fix = f"did you mean {latest}?" if latest.exists() else "pass a folder written by save_pretrained"
        raise UserError("model", f"{folder} is not a masked-LM checkpoint: it lacks {', '.join(missing)}; {fix}")


def load_masked_lm(folder: Union[str, Path]) -> tuple[Any, Any]:
    """(model, tokenizer) from a Hugging Face masked-LM folder, or a UserError that says what is wrong with it."""
    from transformers import AutoConfig, AutoModelForMaskedLM  # transformers: heavy, loaded on use

    # transformers: heavy, loaded on use
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    folder = Path(folder)
    check_checkpoint_folder(folder)
    written = model_config(folder)  # no code of the folder's, and every key read here of the right type
    family = family_of(written["model_type"])
    if family is not None:
        family.check_runs(written, folder)
    with quiet_transformers():
        try:
            config = from_pretrained(AutoConfig, folder)
        except Exception as error:  # bad JSON, unknown model_type: many types, one meaning
            raise UserError("model", f"{folder}/config.json cannot be read: {first_line(error)}") from error
        if config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
            raise UserError("model", f"{folder} holds a {config.model_type!r} model, which has no masked-LM head")
        try:
            mlm, info = from_pretrained(AutoModelForMaskedLM, folder, config=config, output_loading_info=True)
        except UserError:  # a pickle mlmtrain does not unpickle (model_folder.from_pretrained)
            raise
        except Exception as error:  # safetensors, pickle and torch errors: a truncated or damaged file
            if "mismatch" in str(error).lower():  # whole weights of other shapes: it is config.json that changed
                raise UserError(
                    "model",
                    f"the weights in {folder} do not have the shapes its config.json describes (it was edited, or "
                    "belongs to another model), so the folder is not a valid model: restore that config.json or use "
                    "another checkpoint",
                ) from error
            raise UserError(
                "model",
                f"cannot load the weights in {folder} ({first_line(error)}); the file is truncated or corrupt: "
                "copy the checkpoint again or use another one",
            ) from error
        tokenizer = load_tokenizer(folder)
    missing = sorted(info["missing_keys"])
    if missing:  # transformers would fill them with random values: a bare encoder, say, without the MLM head
        raise UserError(
            "model",
            f"the weights in {folder} lack {len(missing)} tensor(s) of the masked-LM model (e.g. {missing[0]}); "
            "it is not a masked-LM checkpoint",
        )
    check_tokenizer_fits(tokenizer, mlm.config, folder)
    return mlm.eval(), tokenizer


def check_tokenizer_fits(tokenizer: Any, config: Any, where: Union[str, Path]) -> None:
    """A UserError when the tokenizer can emit ids the model has no embedding row for (an IndexError deep in the
    forward pass otherwise): every command that pairs a model with a tokenizer checks this before its first batch."""
    rows = getattr(config, "vocab_size", None)
    if rows is not None and len(tokenizer) > rows:
        raise UserError(
            "model",
            f"the tokenizer in {where} has {len(tokenizer)} tokens but the model only {rows} embedding rows; "
            "the tokenizer does not belong to this model: put the model's own tokenizer files beside it",
        )
