"""Sentence pairs for `train.objective: mlm+nsp` (BERT's next-sentence prediction) and `mlm+sop` (ALBERT's sentence
order): pair blocks cut from the token store's documents, their collator, the model (a `BertForPreTraining`: MLM
through the sparse head, the pair head on the pooled [CLS]) and its evaluation on fixed pairs.

Each document is cut into windows of up to seq_len - 3 tokens (a tail shorter than two segments is dropped); block i
is window i. A pair block is [CLS] A [SEP] B [SEP], token types 0 then 1, A and B the window split at a sentence end
(or anywhere, when the window has none between two segments' worth of tokens). NSP: with probability 0.5, B is
replaced by a span of another document (label 1, "not next"); SOP: with probability 0.5, A and B swap (label 1).
Every draw of block i comes from a generator seeded by (seed, epoch, i), like its masks: resume stays exact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertForPreTraining

from mlmtrain.config import Config, MaskingConfig, ModelConfig
from mlmtrain.data.masking import IGNORE_INDEX, MaskingCollator, VocabInfo, mix_seed
from mlmtrain.data.store import TokenStore
from mlmtrain.errors import UserError
from mlmtrain.model.bert import MaskedLM, bert_config
from mlmtrain.model.context import autocast_context, eval_mode

PAIR_STREAM = 0x5041  # a fourth value mixed into the seed, so the pair draws of a block are not its mask draws
SENTENCE_ENDS = (".", "!", "?")  # a segment preferably ends after one of these

MIN_SEGMENT = 4  # tokens each segment of a sentence pair holds at least


class PairWindows:
    """The windows of a token-store split that pair blocks are cut from: window i is block i."""

    def __init__(
        self,
        store: TokenStore,
        seq_len: int,
        objective: str,
        next_sentence: bool,
        sentence_end_ids: Sequence[int],
        cls_id: int,
        sep_id: int,
    ) -> None:
        """`objective` names the train.objective in errors; `next_sentence`: NSP's false B (else SOP's swap)."""
        self.store, self.next_sentence, self.cls_id, self.sep_id = store, next_sentence, cls_id, sep_id
        self.body = seq_len - 3  # room for A and B beside [CLS], [SEP], [SEP]
        ends = np.asarray(store.doc_ends, dtype=np.int64)
        starts = np.concatenate(([0], ends[:-1]))
        lengths = ends - starts - 1  # without the trailing [SEP]
        shortest = 2 * MIN_SEGMENT
        counts = lengths // self.body + (lengths % self.body >= shortest)
        total = int(counts.sum())
        self.doc = np.repeat(np.arange(len(lengths)), counts)
        within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        self.start = starts[self.doc] + within * self.body
        self.length = np.minimum(self.body, lengths[self.doc] - within * self.body)
        self.sentence_ends = np.asarray(sorted(set(sentence_end_ids)), dtype=np.int64)
        documents = int((counts > 0).sum())
        needed = 2 if next_sentence else 1  # NSP draws its false B from another document
        if documents < needed:
            raise UserError(
                "data",
                f"the {store.split} split has {documents} document(s) of {shortest} tokens or more, the least two "
                f"segments take; train.objective {objective} needs {needed}: use longer documents "
                "(data.txt_documents: paragraph) or train.objective: mlm",
            )

    def __len__(self) -> int:
        return len(self.start)

    def __getitem__(self, index: int) -> np.ndarray:
        start = int(self.start[index])
        return np.asarray(self.store.tokens(start, start + int(self.length[index])), dtype=np.int64)

    def cut(self, window: np.ndarray, generator: np.random.Generator) -> int:
        """Where A ends: a sentence end with at least MIN_SEGMENT tokens on either side, else any such point."""
        low, high = MIN_SEGMENT, len(window) - MIN_SEGMENT
        after_end = np.flatnonzero(np.isin(window[low - 1 : high], self.sentence_ends)) + low
        if len(after_end):
            return int(after_end[generator.integers(len(after_end))])
        return int(generator.integers(low, high + 1))

    def other_span(self, index: int, length: int, generator: np.random.Generator) -> np.ndarray:
        """Up to `length` tokens of a window of another document than window `index`'s."""
        other = (index + int(generator.integers(1, len(self)))) % len(self)
        while self.doc[other] == self.doc[index]:  # a document's windows are consecutive: walk past them
            other = (other + 1) % len(self)
        take = min(length, int(self.length[other]))
        offset = int(self.start[other]) + int(generator.integers(0, int(self.length[other]) - take + 1))
        return np.asarray(self.store.tokens(offset, offset + take), dtype=np.int64)

    def collator(
        self, vocab: VocabInfo, masking: MaskingConfig, seed: int, total_steps: Optional[int] = None
    ) -> PairCollator:
        """The collate_fn that draws and masks these windows' pairs with `seed` (`total_steps`: as the MLM
        collator's, for a masking schedule)."""
        return PairCollator(self, vocab, masking, seed, total_steps)

    def pair(self, index: int, epoch: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(A, B, label) of block `index` in `epoch`: a pure function of (seed, epoch, index)."""
        generator = np.random.Generator(np.random.PCG64(mix_seed(seed, epoch, index, PAIR_STREAM)))
        window = self[index]
        split = self.cut(window, generator)
        first, second = window[:split], window[split:]
        label = int(generator.random() < 0.5)
        if label and self.next_sentence:
            second = self.other_span(index, len(second), generator)
        elif label:
            first, second = second, first
        return first, second, label


def pair_block(first: np.ndarray, second: np.ndarray, cls_id: int, sep_id: int) -> tuple[np.ndarray, np.ndarray]:
    """([CLS] A [SEP] B [SEP], token types 0 for [CLS] A [SEP] and 1 for B [SEP])."""
    ids = np.concatenate(([cls_id], first, [sep_id], second, [sep_id])).astype(np.int64)
    types = np.zeros(len(ids), dtype=np.int64)
    types[len(first) + 2 :] = 1
    return ids, types


class PairCollator:
    """DataLoader collate_fn for pair blocks: draws each item's pair by (seed, epoch, index), masks it with the
    MLM collator (same seeds as any block), pads the token types with 0 and adds `next_sentence_label`."""

    def __init__(
        self,
        windows: PairWindows,
        vocab: VocabInfo,
        masking: MaskingConfig,
        seed: int,
        total_steps: Optional[int] = None,
    ) -> None:
        self.windows, self.seed = windows, seed
        self.masking = MaskingCollator(vocab, masking, seed=seed, total_steps=total_steps)

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        blocks, labels = [], []
        for item in items:
            first, second, label = self.windows.pair(int(item["index"]), int(item["epoch"]), self.seed)
            blocks.append(pair_block(first, second, self.windows.cls_id, self.windows.sep_id))
            labels.append(label)
        batch = self.masking(
            [
                {**item, "input_ids": ids}  # epoch, index and step as the block came
                for (ids, _), item in zip(blocks, items, strict=True)
            ]
        )
        types = torch.zeros(batch["input_ids"].shape, dtype=torch.long)  # padding is type 0
        for row, (_, block_types) in enumerate(blocks):
            types[row, : len(block_types)] = torch.from_numpy(block_types)
        return {**batch, "token_type_ids": types, "next_sentence_label": torch.tensor(labels, dtype=torch.long)}


def sentence_end_ids(tokenizer: Any) -> list[int]:
    """The ids of the sentence-ending tokens the vocabulary has."""
    ids = tokenizer.convert_tokens_to_ids(list(SENTENCE_ENDS))
    return [i for i in ids if i is not None and i != tokenizer.unk_token_id]


def pair_windows(cfg: Config, store: TokenStore, tokenizer: Any, next_sentence: bool) -> PairWindows:
    """The pair windows of one split of the run's token store: NSP's (`next_sentence`) or SOP's."""
    ids = sentence_end_ids(tokenizer)
    return PairWindows(
        store, cfg.data.seq_len, cfg.train.objective, next_sentence, ids, tokenizer.cls_token_id, tokenizer.sep_token_id
    )


def build_pretraining(cfg: ModelConfig, vocab_size: int, pad_id: int) -> BertForPreTraining:
    """A freshly initialised `BertForPreTraining` (MLM head tied to the word embedding, pooler, pair head)."""
    model = BertForPreTraining(bert_config(cfg, vocab_size, pad_id))
    if model.cls.predictions.decoder.weight is not model.bert.embeddings.word_embeddings.weight:
        raise RuntimeError("BertForPreTraining did not tie the decoder to the word embedding")
    return model


class PairPretraining(MaskedLM):
    """The step module of the pair objectives: forward returns the float32 sums of its loss terms [MLM NLL over
    selected positions, pair cross-entropy over blocks, correct pair predictions] (the last only for the metrics: its
    weight is 0)."""

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        next_sentence_label: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        out = self.mlm.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        masked_lm = self.head_loss(out.last_hidden_state, labels)
        logits = self.mlm.cls.seq_relationship(out.pooler_output).float()
        pair = F.cross_entropy(logits, next_sentence_label, reduction="sum")
        correct = (logits.argmax(-1) == next_sentence_label).sum().to(pair.dtype)
        return torch.stack((masked_lm.float(), pair, correct))


@torch.no_grad()
def evaluate_pairs(
    trained: BertForPreTraining,
    windows: PairWindows,
    indices: Sequence[int],
    collator: PairCollator,
    batch_size: int,
    device: torch.device,
    autocast_dtype: Optional[torch.dtype],
) -> dict[str, Any]:
    """MLM and pair metrics on the fixed pairs and masks of blocks `indices` (epoch 0 of the collator's seed)."""
    started = time.perf_counter()
    nll = pair_nll = 0.0
    masked = correct_tokens = correct_pairs = pairs = 0
    with eval_mode(trained):
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            batch = collator([{"input_ids": None, "epoch": 0, "index": int(i)} for i in chunk])
            batch = {k: v.to(device) for k, v in batch.items()}
            selected = batch["labels"] != IGNORE_INDEX
            with autocast_context(device, autocast_dtype):
                out = trained.bert(
                    batch["input_ids"],
                    attention_mask=batch.get("attention_mask"),
                    token_type_ids=batch["token_type_ids"],
                )
                # the MLM head on the selected rows only, as in training: no [B, T, V] logits
                logits = trained.cls.predictions(out.last_hidden_state[selected]).float()
                pair_logits = trained.cls.seq_relationship(out.pooler_output).float()
            targets = batch["labels"][selected]
            nll += float(F.cross_entropy(logits, targets, reduction="sum"))
            correct_tokens += int((logits.argmax(-1) == targets).sum())
            masked += len(targets)
            pair_labels = batch["next_sentence_label"]
            pair_nll += float(F.cross_entropy(pair_logits, pair_labels, reduction="sum"))
            correct_pairs += int((pair_logits.argmax(-1) == pair_labels).sum())
            pairs += len(pair_labels)
    mlm_loss = nll / masked if masked else float("nan")
    pair_loss = pair_nll / pairs
    return {
        "eval_loss": mlm_loss + pair_loss,
        "eval_ppl": math.exp(mlm_loss) if masked else float("nan"),
        "eval_acc": correct_tokens / masked if masked else float("nan"),
        "eval_mlm_loss": mlm_loss,
        "eval_pair_loss": pair_loss,
        "eval_pair_accuracy": correct_pairs / pairs,
        "eval_masked_tokens": masked,
        "eval_pairs": pairs,
        "eval_seconds": round(time.perf_counter() - started, 3),
    }
