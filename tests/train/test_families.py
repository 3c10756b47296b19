"""model.init_from bases of every family (model/families.py) besides BERT: RoBERTa with a byte-level BPE, DistilBERT
with a WordPiece, ModernBERT with a byte-level BPE, DeBERTa-v2 with a SentencePiece Unigram, each written by
transformers' own classes with a tokenizer trained here. A continued run learns, resumes exactly, reloads as the
base's class with the base's tokenization and answers fill-mask; whole-word masks follow each tokenizer's word
marks; what a family cannot do is refused in one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.train.loop import pretrain

from ..evaluate.test_probe import topics  # noqa: F401  (a fixture: a tiny labelled task)
from ..helpers import WORDS, assert_one_error_line, metrics, run_cli, step_losses, weights, write_corpus
from .test_init_from import POSITIONS, SHAPE, base_tokenizer, continue_options

BPE_SPECIALS = {"cls_token": "<s>", "pad_token": "<pad>", "sep_token": "</s>", "unk_token": "<unk>"}
BRACKET_SPECIALS = {"cls_token": "[CLS]", "pad_token": "[PAD]", "sep_token": "[SEP]", "unk_token": "[UNK]"}
SAMPLE = "The quick brown fox jumps over the lazy dog near my big sphinx of quartz."


def trained_tokenizer(kind: str, roles: dict[str, str], mask: str | None = "<mask>"):
    """A fast tokenizer trained on the corpus words in milliseconds: `kind` bpe (byte-level, 'Ġ' word starts),
    unigram (SentencePiece, '▁' word starts) or plain (a BPE that marks no words)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [*roles.values(), *([mask] if mask else [])]
    lines = [" ".join(WORDS[i:] + WORDS[:i]).capitalize() + "." for i in range(len(WORDS))]
    if kind == "unigram":
        backend = Tokenizer(models.Unigram())
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
        backend.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=120, special_tokens=specials, unk_token=roles["unk_token"])
    else:
        backend = Tokenizer(models.BPE(unk_token=None if kind == "bpe" else roles["unk_token"]))
        if kind == "bpe":
            backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            backend.decoder = decoders.ByteLevel()
            alphabet = pre_tokenizers.ByteLevel.alphabet()
        else:
            backend.pre_tokenizer = pre_tokenizers.Whitespace()
            alphabet = []
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, initial_alphabet=alphabet)
    backend.train_from_iterator(lines, trainer)
    cls, sep = roles["cls_token"], roles["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, **roles, **({"mask_token": mask} if mask else {}))


def _ids(tokenizer) -> dict[str, int]:
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id}


def _roberta(tokenizer, model_type: str = "roberta"):
    """A RoBERTa, or a model of a type the RoBERTa family takes (xlm-roberta, camembert) with its own classes."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    # RoBERTa's positions start after padding_idx: pad + 1 more rows than the longest sequence
    rows = POSITIONS + tokenizer.pad_token_id + 1
    config = AutoConfig.for_model(
        model_type, vocab_size=len(tokenizer), max_position_embeddings=rows, type_vocab_size=1, **SHAPE
    )
    config.update({**_ids(tokenizer), "eos_token_id": tokenizer.sep_token_id})
    return AutoModelForMaskedLM.from_config(config)


def _distilbert(tokenizer):
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    config = DistilBertConfig(
        vocab_size=len(tokenizer), dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=POSITIONS
    )
    config.pad_token_id = tokenizer.pad_token_id
    return DistilBertForMaskedLM(config)


def _modernbert(tokenizer):
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    config = ModernBertConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=POSITIONS,
        global_attn_every_n_layers=2,
        local_attention=16,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
        eos_token_id=tokenizer.sep_token_id,
        **_ids(tokenizer),
        **SHAPE,
    )
    return ModernBertForMaskedLM(config)


def _deberta(tokenizer):
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM

    config = DebertaV2Config(  # DeBERTa-v3's attention: relative positions, none added to the input
        vocab_size=len(tokenizer),
        max_position_embeddings=POSITIONS,
        relative_attention=True,
        position_buckets=16,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        type_vocab_size=0,
        pad_token_id=tokenizer.pad_token_id,
        **SHAPE,
    )
    return DebertaV2ForMaskedLM(config)


# family -> (its masked-LM class, how to build it, its tokenizer: kind and special tokens, its mask token)
FAMILIES = {
    "roberta": ("RobertaForMaskedLM", _roberta, "bpe", BPE_SPECIALS, "<mask>"),
    "distilbert": ("DistilBertForMaskedLM", _distilbert, "wordpiece", BRACKET_SPECIALS, "[MASK]"),
    "modernbert": ("ModernBertForMaskedLM", _modernbert, "bpe", BRACKET_SPECIALS, "[MASK]"),
    "deberta-v2": ("DebertaV2ForMaskedLM", _deberta, "unigram", BRACKET_SPECIALS, "[MASK]"),
}


def family_tokenizer(family: str, mask: bool = True):
    _, _, kind, roles, mask_token = FAMILIES[family]
    if kind == "wordpiece":
        return base_tokenizer(mask)
    return trained_tokenizer(kind, roles, mask_token if mask else None)


def write_family_base(folder: Path, family: str, tokenizer=None) -> Path:
    """A tiny masked LM of `family` (its transformers class, random weights from a fixed seed) and its tokenizer."""
    tokenizer = tokenizer or family_tokenizer(family)
    if family in ("distilbert", "modernbert"):  # as their published tokenizers say: these models take no token types
        tokenizer.model_input_names = tokenizer.init_kwargs["model_input_names"] = ["input_ids", "attention_mask"]
    torch.manual_seed(7)
    FAMILIES[family][1](tokenizer).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("family-bases")
    return {family: write_family_base(root / family, family) for family in FAMILIES}


def _options(tiny_data: Path, base: Path, root: Path, **extra: object) -> list[str]:
    """`continue_options` on the corpus new.txt beside `root`, stating the base's own positions (RoBERTa's has two
    more)."""
    positions = json.loads((base / "config.json").read_text())["max_position_embeddings"]
    extra = {"data.train": str(root.parent / "new.txt"), "model.max_position_embeddings": positions, **extra}
    return continue_options(tiny_data, base, root, **extra)


def _cli(capsys: pytest.CaptureFixture, options: list[str], *more: str) -> tuple[int, list[str]]:
    return run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)], *more)


# RoBERTa and ModernBERT, the bases most continued, also under the oldest transformers declared
OLDPINS_FAMILIES = [
    pytest.param(f, marks=pytest.mark.oldpins) if f in ("roberta", "modernbert") else f for f in sorted(FAMILIES)
]


@pytest.mark.parametrize("family", OLDPINS_FAMILIES)
def test_a_continued_base_of_each_family_learns_resumes_exactly_and_reloads_as_its_own_class(
    family: str,
    bases: dict[str, Path],
    tiny_data: Path,
    topics: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    base = bases[family]
    write_corpus(tmp_path / "new.txt", 300, seed=5)
    common = {"train.max_steps": 16, "optim.lr": 3e-3, "train.eval_every": 8, "checkpoint.save_every": 8}
    final = pretrain(load_config(None, _options(tiny_data, base, tmp_path / "whole", **common)))
    evals = [m for m in metrics(tmp_path / "whole" / "run") if "eval_ppl" in m]
    assert [m["step"] for m in evals] == [0, 8, 16]
    assert evals[-1]["eval_ppl"] < evals[0]["eval_ppl"] * 0.8  # held-out perplexity: the base's at step 0, then down

    # paused at step 8 and resumed: the same losses and weights as the run that never stopped
    paused = _options(tiny_data, base, tmp_path / "paused", **common)
    assert pretrain(load_config(None, [*paused, "train.pause_after=8"])).name == "step-8"
    code, lines = _cli(capsys, paused, "--resume", "auto")
    assert code == 0, lines
    assert step_losses(tmp_path / "paused" / "run") == step_losses(tmp_path / "whole" / "run")
    a, b = weights(final), weights(tmp_path / "paused" / "run" / "checkpoints" / "step-16")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key

    # the checkpoint is the base's own class and tokenizer, as plain transformers loads them
    reloaded = AutoModelForMaskedLM.from_pretrained(str(final))
    assert type(reloaded).__name__ == FAMILIES[family][0]
    assert json.loads((final / "config.json").read_text())["model_type"] == family
    mine, theirs = AutoTokenizer.from_pretrained(str(final)), AutoTokenizer.from_pretrained(str(base))
    assert mine(SAMPLE).input_ids == theirs(SAMPLE).input_ids
    answers = pipeline("fill-mask", model=str(final))(f"The quick brown {theirs.mask_token} jumps.", top_k=3)
    assert len(answers) == 3 and all(answer["token_str"] for answer in answers)
    masked = f"The quick brown {theirs.mask_token} jumps."
    for command in (
        ["eval-perplexity", "--data", str(tiny_data / "valid.txt"), "--seq-len", "32"],
        ["fill-mask", masked],
    ):
        code, lines = run_cli(capsys, command[0], "--model", str(final), *command[1:])
        assert code == 0, lines
    probe = ["--task", str(topics / "task"), "--mode", "linear", "--max-length", "32", "--device", "cpu"]
    code, lines = run_cli(capsys, "probe", "--model", str(final), *probe)
    assert code == 0, lines
    code, lines = run_cli(capsys, "report", str(tmp_path / "whole" / "run"))
    assert code == 0, lines
    card = (final / "README.md").read_text()  # the card reads the shape under the family's own key names
    assert "A 2-layer " in card and "| layers | 2 |" in card and "| hidden size | 32 |" in card


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_sparse_head_of_each_family_scores_as_its_full_logits(family: str, bases: dict[str, Path]) -> None:
    """The training step's loss (the head on the selected rows only, sparse or not) and eval-perplexity's per-row NLL
    equal the cross-entropy of the model's own full logits."""
    import torch.nn.functional as F

    from mlmtrain.data.masking import IGNORE_INDEX
    from mlmtrain.evaluate.perplexity import load_masked_lm, per_row_nll
    from mlmtrain.model.bert import MaskedLM

    mlm, tokenizer = load_masked_lm(bases[family])
    ids = torch.tensor([tokenizer(SAMPLE).input_ids] * 2)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 3:5] = ids[0, 2], ids[1, 3:5]
    with torch.no_grad():
        logits = mlm(input_ids=ids).logits
        expected = F.cross_entropy(logits[labels != IGNORE_INDEX], labels[labels != IGNORE_INDEX], reduction="sum")
        nll, counts, _ = per_row_nll(mlm, ids, labels, None)
        sparse, dense = (float(MaskedLM(mlm, sparse_head=sparse)(ids, labels)) for sparse in (True, False))
    assert counts.tolist() == [1, 2]
    for value in (float(nll.sum()), sparse, dense):
        assert value == pytest.approx(float(expected), rel=1e-5)


# ---------------------------------------------------------------------------------------------
# Whole-word masks: each tokenizer kind's word marks


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_whole_word_masks_take_every_piece_of_a_word_for_each_tokenizer_kind(kind: str) -> None:
    """WordPiece ('##' inside words), byte-level BPE ('Ġ' at word starts) and SentencePiece ('▁' at word starts):
    masking.whole_word selects the pieces of each whitespace word of the text all together or not at all."""
    import re

    from mlmtrain.config import MaskingConfig
    from mlmtrain.data.masking import VocabInfo, check_whole_words, mask_tokens

    family = {"wordpiece": "distilbert", "bpe": "roberta", "unigram": "deberta-v2"}[kind]
    tokenizer = family_tokenizer(family)
    check_whole_words(tokenizer, family)  # accepted before anything is written
    text = " ".join(["the wonderland rabbit jumps over the hatter and the quick fox"] * 3)
    encoded = tokenizer(text, return_offsets_mapping=True)
    words = [match.span() for match in re.finditer(r"\S+", text)]
    word_of = [  # the whitespace word a piece ends in (a lone 'Ġ' or '▁': the word it begins); None for specials
        next(i for i, (_, end) in enumerate(words) if last < end) if last >= 0 else None
        for last in (end - 1 for _, end in encoded.offset_mapping)
    ]
    assert any(word_of.count(i) > 1 for i in range(len(words)))  # some words split into several pieces
    vocab = VocabInfo.from_tokenizer(tokenizer)
    ids = torch.tensor([encoded.input_ids])
    masking = MaskingConfig(whole_word=True, mlm_probability=0.3)
    chosen_words = set()
    for seed in range(20):
        _, labels = mask_tokens(ids, vocab, masking, [seed])
        selected = (labels[0] != -100).tolist()
        for word in set(word_of) - {None}:
            decisions = {selected[i] for i, w in enumerate(word_of) if w == word}
            assert len(decisions) == 1, (seed, text[slice(*words[word])])
            if True in decisions and word_of.count(word) > 1:
                chosen_words.add(word)
    assert chosen_words  # a word of several pieces was masked whole


# ---------------------------------------------------------------------------------------------
# Bad input: one line naming the problem and what works, exit 2, nothing written


def _albert(folder: Path) -> Path:
    from transformers import AlbertConfig, AlbertForMaskedLM

    tokenizer = base_tokenizer()
    AlbertForMaskedLM(AlbertConfig(vocab_size=len(tokenizer), embedding_size=16, **SHAPE)).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def _more_tokens_than_rows(folder: Path) -> Path:
    write_family_base(folder, "roberta")
    tokenizer = family_tokenizer("roberta")
    tokenizer.add_tokens(["<extra-one>", "<extra-two>"])  # ids past the model's embedding rows
    tokenizer.save_pretrained(str(folder))
    return folder


def _rtd_deberta(folder: Path) -> Path:
    """A DeBERTa-v3 as ELECTRA-style training leaves it: the encoder (DebertaV2Model) without its masked-LM head."""
    from transformers import DebertaV2Model

    tokenizer = family_tokenizer("deberta-v2")
    write_family_base(folder, "deberta-v2", tokenizer)
    DebertaV2Model(_deberta(tokenizer).config).save_pretrained(str(folder))
    return folder


def _modernbert_odd_heads(folder: Path) -> Path:
    """A ModernBERT of heads of 15 dimensions (30 / 2), which its rotary positions cannot turn."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    tokenizer = family_tokenizer("modernbert")
    write_family_base(folder, "modernbert", tokenizer)
    config = ModernBertConfig.from_pretrained(str(folder))
    config.update({"hidden_size": 30, "intermediate_size": 60})
    ModernBertForMaskedLM(config).save_pretrained(str(folder))
    return folder


# the families whose encoder cannot keep a token to its own document (data.document_attention within), by their names
NOT_WITHIN_DOCUMENTS = {"distilbert": "DistilBERT", "deberta-v2": "DeBERTa-v2/v3"}
BAD_BASES = {
    "albert": (
        _albert,
        {},
        "model.init_from",
        "'albert' model; mlmtrain reads masked LMs of these model types: bert",
    ),
    "no-mask-token": (
        lambda folder: write_family_base(folder, "roberta", family_tokenizer("roberta", mask=False)),
        {},
        "model.init_from",
        "no mask token",
    ),
    "rows": (_more_tokens_than_rows, {}, "model.init_from", "tokens but the model only"),
    "deberta-without-mlm-head": (_rtd_deberta, {}, "model.init_from", "use one with its masked-LM head"),
    "modernbert-odd-heads": (_modernbert_odd_heads, {}, "model.init_from", "heads of 15 dimension(s)", "rotary"),
    "whole-word-unmarked": (
        lambda folder: write_family_base(folder, "modernbert", trained_tokenizer("plain", BRACKET_SPECIALS, "[MASK]")),
        {"masking.whole_word": True},
        "masking",
        "masking.whole_word needs a WordPiece",
    ),
    "extend-bpe": (
        lambda folder: write_family_base(folder, "roberta"),
        {"tokenizer.extend_vocab": 5},
        "tokenizer",
        "extend_vocab extends WordPiece tokenizers, and the one of",
    ),
    "extend-unigram": (
        lambda folder: write_family_base(folder, "deberta-v2"),
        {"tokenizer.extend_vocab": 5},
        "tokenizer",
        "is Unigram; drop tokenizer.extend_vocab",
    ),
    "electra-from-roberta": (
        lambda folder: write_family_base(folder, "roberta"),
        {"train.objective": "electra"},
        "model.init_from",
        "(a RoBERTa base continues with mlm)",
    ),
    **{
        f"within-{family}": (
            lambda folder, family=family: write_family_base(folder, family),
            {"data.document_attention": "within"},
            "data.document_attention within needs a BERT, RoBERTa or ModernBERT model",
            f"(a {name} model) is not one",
        )
        for family, name in NOT_WITHIN_DOCUMENTS.items()
    },
    "roberta-positions": (
        lambda folder: write_family_base(folder, "roberta"),
        {"data.seq_len": POSITIONS + 2},
        "data.seq_len",
        f"beyond the {POSITIONS} positions",
    ),
}


# data.document_attention auto: (settings, a base family to continue or None, what it becomes); ModernBERT keeps to
# documents under transformers 5 alone
_MODERN_WITHIN = "within" if int(__import__("transformers").__version__.split(".")[0]) >= 5 else "packed"
AUTO_ATTENTION = {
    "bert": ({}, None, "within"),
    "modernbert": ({"model.architecture": "modernbert"}, None, _MODERN_WITHIN),
    "roberta-base": ({}, "roberta", "within"),
    "electra": ({"train.objective": "electra"}, None, "packed"),
    "sentence-pairs": ({"train.objective": "mlm+sop"}, None, "packed"),
    "unpacked": ({"data.packing": False}, None, "packed"),
    **{f"{family}-base": ({}, family, "packed") for family in NOT_WITHIN_DOCUMENTS},
}


@pytest.mark.oldpins
@pytest.mark.parametrize("case", sorted(AUTO_ATTENTION))
def test_attention_auto_keeps_to_documents_where_the_run_can_and_packs_elsewhere(case: str, tmp_path: Path) -> None:
    """auto never refuses: it is within where the objective, the model and the data can, else packed, and the
    resolved config (what pretrain saves and eval-perplexity reads) says which."""
    from mlmtrain.train.init_from import resolve_init_from

    settings, base, expected = AUTO_ATTENTION[case]
    if base is not None:
        settings = {**settings, "model.init_from": str(write_family_base(tmp_path / base, base))}
    cfg = load_config(None, {"data.document_attention": "auto", "data.seq_len": 32, **settings})
    cfg = resolve_init_from(cfg, check_weights=False).cfg
    assert cfg.data.document_attention == expected
    assert f"document_attention: {expected}" in cfg.to_yaml()


@pytest.mark.parametrize("case", sorted(BAD_BASES))
def test_what_a_family_cannot_do_is_refused_in_one_line(
    case: str, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    make, extra, *needles = BAD_BASES[case]
    base = make(tmp_path / "base")
    write_corpus(tmp_path / "new.txt", 20, seed=5)
    code, lines = _cli(capsys, _options(tiny_data, base, tmp_path / "out", **extra))
    assert code == 2
    assert_one_error_line(lines, *needles)
    assert not (tmp_path / "out").exists()


def test_the_commands_count_robertas_positions_after_its_padding_offset(
    bases: dict[str, Path], tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """A RoBERTa with 66 position rows takes 64 tokens: eval-perplexity and probe refuse 66 in one line rather than
    fail inside the model."""
    base = str(bases["roberta"])
    for command in (
        ["eval-perplexity", "--model", base, "--data", str(tiny_data / "valid.txt"), "--seq-len", "66"],
        ["probe", "--model", base, "--task", str(tiny_data), "--max-length", "66"],
    ):
        code, lines = run_cli(capsys, *command)
        assert code == 2
        assert_one_error_line(lines, "argument", f"beyond the model's {POSITIONS} positions")


@pytest.mark.oldpins
def test_a_deberta_with_the_v3_head_scores_on_the_selected_rows_as_its_full_logits(
    tmp_path: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """DeBERTa's non-legacy head (config.legacy false) projects onto the word embedding with a bias of its own;
    transformers 4.x cannot run it (it ties the head's dense layer to the word embeddings): refused in one line."""
    import torch.nn.functional as F
    import transformers

    from mlmtrain.data.masking import IGNORE_INDEX
    from mlmtrain.model.bert import MaskedLM

    tokenizer = family_tokenizer("deberta-v2")
    torch.manual_seed(3)
    config = _deberta(tokenizer).config
    config.legacy = False
    if int(transformers.__version__.split(".")[0]) < 5:
        folder = write_family_base(tmp_path / "v3", "deberta-v2", tokenizer)
        saved = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**saved, "legacy": False}))
        write_corpus(tmp_path / "new.txt", 50, seed=5)
        for code, lines in (
            run_cli(capsys, "fill-mask", "--model", str(folder), "a [MASK]"),
            _cli(capsys, _options(tiny_data, folder, tmp_path / "run")),
        ):
            assert code == 2
            assert_one_error_line(lines, "legacy: false", "install transformers>=5")
        assert not (tmp_path / "run").exists()
        return
    mlm = type(_deberta(tokenizer))(config)
    assert hasattr(mlm, "lm_predictions")
    mlm.eval()
    ids = torch.tensor([tokenizer(SAMPLE).input_ids])
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2:5] = ids[0, 2:5]
    with torch.no_grad():
        logits = mlm(input_ids=ids).logits[labels != IGNORE_INDEX]
        expected = float(F.cross_entropy(logits, labels[labels != IGNORE_INDEX], reduction="sum"))
        for sparse in (True, False):
            assert float(MaskedLM(mlm, sparse_head=sparse)(ids, labels)) == pytest.approx(expected, rel=1e-5)


# every model type of the family table (model/families.py): its base's masked-LM class, how to build it and tokenizer
MODEL_TYPES = {
    **{family: (spec[0], spec[1], family) for family, spec in FAMILIES.items()},
    "bert": ("BertForMaskedLM", None, "distilbert"),  # write_base: a BERT with a WordPiece
    "xlm-roberta": ("XLMRobertaForMaskedLM", lambda tokenizer: _roberta(tokenizer, "xlm-roberta"), "deberta-v2"),
    "camembert": ("CamembertForMaskedLM", lambda tokenizer: _roberta(tokenizer, "camembert"), "deberta-v2"),
}


def test_every_model_type_of_the_family_table_has_a_case_below() -> None:
    from mlmtrain.model.families import FAMILIES as TABLE

    assert {model_type for family in TABLE for model_type in family.model_types} == set(MODEL_TYPES)


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_a_checkpoint_is_saved_as_its_bases_own_class_and_model_type(
    model_type: str, tiny_data: Path, tmp_path: Path
) -> None:
    """XLM-RoBERTa and CamemBERT share RoBERTa's family but keep their own class: a continued base's checkpoint has
    the base's model_type and architectures, and AutoModelForMaskedLM loads it as the base's class."""
    from transformers import AutoModelForMaskedLM

    from .test_init_from import write_base

    name, build, tokenizer_of = MODEL_TYPES[model_type]
    base = tmp_path / "base"
    if build is None:
        write_base(base)
    else:
        tokenizer = family_tokenizer(tokenizer_of)
        if model_type in ("xlm-roberta", "camembert"):  # SentencePiece, with RoBERTa's special tokens
            tokenizer = trained_tokenizer("unigram", BPE_SPECIALS, "<mask>")
        torch.manual_seed(7)
        build(tokenizer).save_pretrained(str(base))
        tokenizer.save_pretrained(str(base))
    written = json.loads((base / "config.json").read_text())
    assert (written["model_type"], written["architectures"]) == (model_type, [name])
    write_corpus(tmp_path / "new.txt", 40, seed=5)
    one_step = {"train.max_steps": 1, "train.eval_every": 0, "checkpoint.save_every": 1}
    final = pretrain(load_config(None, _options(tiny_data, base, tmp_path / "run", **one_step)))
    saved = json.loads((final / "config.json").read_text())
    assert (saved["model_type"], saved["architectures"]) == (model_type, [name])
    assert type(AutoModelForMaskedLM.from_pretrained(str(final))).__name__ == name


def test_a_modernbert_base_with_many_positions_is_counted_by_its_weights_not_a_position_table(
    tiny_data: Path, tmp_path: Path
) -> None:
    """ModernBERT's positions are rotary, with no table: a base stating a billion of them holds the weights of its
    layers alone and continues, where counting a BERT's position table (a billion rows) refused it as too big."""
    from transformers import ModernBertForMaskedLM

    base = write_family_base(tmp_path / "base", "modernbert")
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 10**9}))
    write_corpus(tmp_path / "new.txt", 40, seed=5)
    one_step = {"train.max_steps": 1, "train.eval_every": 0, "checkpoint.save_every": 1}
    options = _options(tiny_data, base, tmp_path / "run", **one_step)
    final = pretrain(load_config(None, options))
    assert type(ModernBertForMaskedLM.from_pretrained(str(final))).__name__ == "ModernBertForMaskedLM"
