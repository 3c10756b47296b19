"""Write a randomly initialised masked LM of another family, at the shape of one of mlmtrain's sizes, as a base to
continue: the benchmark's adapt section measures continued-pretraining speed on it where no published model of that
family and size can be downloaded.

    python scripts/make_base.py --family roberta --train corpora/wikipedia-vital-summaries/train.txt \
        --out bases/roberta-mini

The model is transformers' own class (RobertaForMaskedLM, ModernBertForMaskedLM) with the layers, width, heads and
feed-forward of configs/<size>.yaml, its weights drawn from --seed; the tokenizer is a byte-level BPE ('Ġ' word
starts) of --vocab-size trained on --train, with the family's special tokens (RoBERTa's <s> </s> <pad> <unk> <mask>,
ModernBERT's [CLS] [SEP] [PAD] [UNK] [MASK]). It is not pretrained: its perplexity means nothing, its speed does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
ROLES = ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")
SPECIALS = {
    "roberta": dict(zip(ROLES, ("<s>", "</s>", "<pad>", "<unk>", "<mask>"), strict=True)),
    "modernbert": dict(zip(ROLES, ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"), strict=True)),
}


def train_tokenizer(family: str, train: Path, vocab_size: int):
    """A byte-level BPE with the family's special tokens, trained on the lines of `train`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    roles = SPECIALS[family]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(roles.values()), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train([str(train)], trainer)
    cls, sep = roles["cls_token"], roles["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **roles)
    tokenizer.model_input_names = tokenizer.init_kwargs["model_input_names"] = ["input_ids", "attention_mask"]
    return tokenizer


def build_model(family: str, shape: dict, tokenizer):
    """The family's masked LM with mlmtrain's size `shape` (model section of configs/<size>.yaml)."""
    import transformers

    sizes = {
        "hidden_size": shape["hidden_size"],
        "num_hidden_layers": shape["num_layers"],
        "num_attention_heads": shape["num_heads"],
        "intermediate_size": shape["intermediate_size"],
    }
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id}
    ids |= {"eos_token_id": tokenizer.sep_token_id}
    positions = shape["max_position_embeddings"]
    if family == "roberta":  # positions count after padding_idx: pad + 1 more rows than the longest sequence
        config = transformers.RobertaConfig(
            vocab_size=len(tokenizer), max_position_embeddings=positions + tokenizer.pad_token_id + 1,
            type_vocab_size=1, **sizes, **ids,
        )  # fmt: skip
        return transformers.RobertaForMaskedLM(config)
    config = transformers.ModernBertConfig(
        vocab_size=len(tokenizer), max_position_embeddings=positions, cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id, **sizes, **ids,
    )  # fmt: skip
    return transformers.ModernBertForMaskedLM(config)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=sorted(SPECIALS), required=True)
    parser.add_argument("--train", type=Path, required=True, help="text to train the tokenizer on")
    parser.add_argument("--out", type=Path, required=True, help="a new folder")
    parser.add_argument("--size", default="mini", help="configs/<size>.yaml's model shape (default mini)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = REPO / "configs" / f"{args.size}.yaml"
    problem = (
        f"--out {args.out} exists; give a new folder" if args.out.exists()
        else f"--train {args.train} is not a file" if not args.train.is_file()
        else f"--size {args.size}: no {config}" if not config.is_file()
        else None
    )  # fmt: skip
    if problem:
        print(f"make_base: {problem}", file=sys.stderr)
        return 2
    shape = yaml.safe_load(config.read_text())["model"]
    tokenizer = train_tokenizer(args.family, args.train, args.vocab_size)
    torch.manual_seed(args.seed)
    model = build_model(args.family, shape, tokenizer)
    model.save_pretrained(str(args.out))
    tokenizer.save_pretrained(str(args.out))
    parameters = sum(p.numel() for p in model.parameters())
    print(f"make_base: a {args.family} masked LM ({parameters:,} parameters) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
