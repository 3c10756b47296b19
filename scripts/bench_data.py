"""Benchmark of the data path: masked blocks per second of mlmtrain's MaskingCollator against
`transformers.DataCollatorForLanguageModeling` on the same blocks, timed interleaved in one run.

    python scripts/bench_data.py [--tokenizer DIR] [--blocks 2048] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

from mlmtrain.config import MaskingConfig
from mlmtrain.masking import MaskingCollator, VocabInfo

WIKI = Path("/work/shared/corpora/wikipedia-vital-summaries/train.txt")
BATCH_SIZE = 32
SEQ_LEN = 128


def bench_collators(blocks: torch.Tensor, tokenizer, rounds: int = 5) -> dict:
    """Time both collators on `blocks` [N, T] in batches of 32; rounds alternate which one goes first.

    Returns masked blocks/s of each (median over rounds) and ours / HF.
    """
    ours = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), MaskingConfig(), seed=0)
    hf = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    batches = list(torch.split(blocks, BATCH_SIZE))
    # each collator gets the item form it is built for: ours needs (epoch, index), HF only input_ids
    ours_items = [[{"input_ids": b, "epoch": 0, "index": i} for i, b in enumerate(batch)] for batch in batches]
    hf_items = [[{"input_ids": b} for b in batch] for batch in batches]

    def blocks_per_s(collate: Callable, all_items: list) -> float:
        start = time.perf_counter()
        for batch_items in all_items:
            collate(batch_items)
        return len(blocks) / (time.perf_counter() - start)

    runs: dict[str, list[float]] = {"ours": [], "hf": []}
    for warmup_and_rounds in range(rounds + 1):
        order = [("ours", ours, ours_items), ("hf", hf, hf_items)]
        for name, collate, all_items in order[:: 1 if warmup_and_rounds % 2 else -1]:
            rate = blocks_per_s(collate, all_items)
            if warmup_and_rounds:  # round 0 warms caches and lazy imports
                runs[name].append(rate)
    ours_rate, hf_rate = statistics.median(runs["ours"]), statistics.median(runs["hf"])
    return {
        "blocks": len(blocks),
        "batch_size": BATCH_SIZE,
        "seq_len": blocks.shape[1],
        "rounds": rounds,
        "ours_blocks_per_s": ours_rate,
        "hf_blocks_per_s": hf_rate,
        "ratio": ours_rate / hf_rate,
    }


def _texts() -> list[str]:
    if WIKI.exists():
        return WIKI.read_text(encoding="utf-8").splitlines()
    from pydoc_data.topics import topics

    return list(topics.values())


def _train_tokenizer(texts: list[str], vocab_size: int = 8000) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    backend.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def _packed_blocks(tokenizer, texts: list[str], count: int) -> torch.Tensor:
    """`count` blocks of [CLS] 126 tokens [SEP] from the concatenated texts (cycled if too short)."""
    body = SEQ_LEN - 2
    stream: list[int] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        if len(stream) >= count * body:
            break
    tokens = torch.tensor(stream).repeat(-(-count * body // len(stream)))[: count * body].view(count, body)
    cls = torch.full((count, 1), tokenizer.cls_token_id)
    sep = torch.full((count, 1), tokenizer.sep_token_id)
    return torch.cat([cls, tokens, sep], dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, help="HF tokenizer folder; default: train an 8000-piece WordPiece")
    parser.add_argument("--blocks", type=int, default=2048, help="blocks of 128 tokens to mask per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per collator")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads; 1 is what a DataLoader worker runs the collator with"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    texts = _texts()
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = _train_tokenizer(texts)
    blocks = _packed_blocks(tokenizer, texts, args.blocks)
    result = bench_collators(blocks, tokenizer, rounds=args.rounds)
    print(
        f"{result['blocks']} blocks x {result['seq_len']} tokens, batch {result['batch_size']}, "
        f"torch threads {torch.get_num_threads()}, median of {result['rounds']} interleaved rounds"
    )
    print(f"mlmtrain MaskingCollator:         {result['ours_blocks_per_s']:10.0f} masked blocks/s")
    print(f"DataCollatorForLanguageModeling:  {result['hf_blocks_per_s']:10.0f} masked blocks/s")
    print(f"ratio: {result['ratio']:.1f}x")


if __name__ == "__main__":
    main()
