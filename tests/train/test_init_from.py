"""model.init_from: continued pretraining from a masked LM written by plain transformers (not mlmtrain): the weights
at step 0 are the base's, the first evaluation is the base's own perplexity, the tokenizer is the base's, a run
resumes exactly; bad bases and conflicting keys are refused in one line with nothing written."""

from __future__ import annotations

import contextlib
import json
import string
from pathlib import Path

import pytest
import torch

from mlmtrain.cli.app import main as cli_main
from mlmtrain.config import load_config
from mlmtrain.errors import UserError
from mlmtrain.train.init_from import resolve_init_from
from mlmtrain.train.loop import pretrain

from ..helpers import WORDS, assert_one_error_line, metrics, run_cli, step_losses, tiny_overrides, weights, write_corpus

SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
POSITIONS = 64


def base_tokenizer(mask: bool = True):
    """A WordPiece tokenizer over the corpus words and single letters, built with `tokenizers` and transformers."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + (["[MASK]"] if mask else [])
    letters = list(string.ascii_lowercase)
    vocab = list(dict.fromkeys([*specials, ".", *sorted(set(WORDS)), *letters, *("##" + c for c in letters)]))
    backend = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(vocab)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    backend.decoder = decoders.WordPiece()
    roles = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    return PreTrainedTokenizerFast(tokenizer_object=backend, **roles, **({"mask_token": "[MASK]"} if mask else {}))


def write_base(folder: Path, head: str = "BertForMaskedLM", mask: bool = True, tokenizer=None) -> Path:
    """A tiny BERT (`head`: BertForMaskedLM, BertForSequenceClassification) and its tokenizer (by default
    `base_tokenizer(mask)`), by save_pretrained."""
    import transformers

    tokenizer = tokenizer or base_tokenizer(mask)
    torch.manual_seed(7)
    config = transformers.BertConfig(vocab_size=len(tokenizer), max_position_embeddings=POSITIONS, **SHAPE)
    getattr(transformers, head)(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_base(tmp_path_factory.mktemp("base") / "tiny-bert")


def continue_options(data: Path, base: Path, root: Path, **extra: object) -> list[str]:
    """--set options continuing `base` on the tiny corpus in `data`, with the tokenizer and store under `root`."""
    return tiny_overrides(
        data,
        **{
            "model.init_from": str(base),
            "tokenizer.vocab_size": 30522,  # the default: the base's tokenizer is used, none is trained
            "tokenizer.path": str(root / "tokenizer"),
            "data.store": str(root / "tokens"),
            "train.run_dir": str(root / "run"),
            "train.precision": "fp32",
            **extra,
        },
    )


def test_shape_and_tokenizer_come_from_the_base_and_defaults_are_ignored(base: Path, tmp_path: Path) -> None:
    cfg = load_config(None, [f"model.init_from={base}", "data.seq_len=32", "model.dropout=0.0"])
    cfg = resolve_init_from(cfg).cfg
    model = cfg.model
    assert (model.hidden_size, model.num_layers, model.num_heads, model.intermediate_size) == (32, 2, 2, 64)
    assert model.max_position_embeddings == POSITIONS
    assert cfg.tokenizer.pretrained == str(base)
    assert model.hidden_dropout_prob == model.attention_dropout_prob == 0.0  # dropout keys may be set
    cfg = resolve_init_from(cfg).cfg  # a resolved config (a saved mlmtrain.yaml) resolves to itself
    assert cfg.model.hidden_size == 32


def test_a_dropout_stated_at_its_default_is_kept_not_replaced_by_the_bases(tmp_path: Path) -> None:
    """A key the user wrote is theirs even when it equals the default: the base's dropout fills only unstated ones."""
    import transformers

    folder = write_base(tmp_path / "no-dropout")
    config = transformers.BertConfig.from_pretrained(str(folder))
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    config.save_pretrained(str(folder))
    cfg = load_config(None, [f"model.init_from={folder}", "data.seq_len=32", "model.hidden_dropout=0.1"])
    cfg = resolve_init_from(cfg).cfg
    assert (cfg.model.hidden_dropout, cfg.model.attention_dropout) == (0.1, 0.0)


def test_after_zero_updates_the_weights_are_the_base_and_the_fast_step_applies(
    base: Path, tiny_data: Path, tmp_path: Path
) -> None:
    from transformers import BertForMaskedLM

    from mlmtrain.data.store import tokenize_corpus
    from mlmtrain.model.bert import build_model, use_training_attention
    from mlmtrain.runtime.distributed import init_distributed
    from mlmtrain.train.step import build_setup

    cfg = load_config(None, continue_options(tiny_data, base, tmp_path))
    cfg = resolve_init_from(cfg).cfg
    tokenize_corpus(cfg, quiet=True)
    setup = build_setup(cfg, init_distributed("cpu"))
    expected = BertForMaskedLM.from_pretrained(str(base)).state_dict()
    got = setup.mlm.state_dict()
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    fresh = build_model(cfg.model, len(base_tokenizer()), 0)  # the attention a fresh run trains with
    use_training_attention(fresh)
    assert setup.mlm.config._attn_implementation == fresh.config._attn_implementation
    assert setup.model.sparse_head and setup.mlm.training


def test_continued_run_starts_at_the_bases_perplexity_learns_and_keeps_its_tokenizer(
    base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from transformers import AutoTokenizer

    from mlmtrain.data.tokenizer import tokenizer_fingerprint
    from mlmtrain.evaluate.perplexity import evaluate_texts, load_masked_lm

    write_corpus(tmp_path / "new.txt", 300, seed=5)
    options = continue_options(
        tiny_data,
        base,
        tmp_path,
        **{
            "data.train": str(tmp_path / "new.txt"),
            "train.max_steps": 30,
            "optim.lr": 3e-3,
            "train.eval_every": 15,
            "train.eval_max_blocks": 10000,
        },
    )
    cfg = load_config(None, options)
    final = pretrain(cfg)
    evals = [m for m in metrics(tmp_path / "run") if "eval_ppl" in m]
    assert [m["step"] for m in evals] == [0, 15, 30]
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] - 0.5
    # step 0 is the base itself: evaluate.py's own reading of the base folder (what `mlmtrain eval-perplexity` runs,
    # here in float32 as the run) on the same validation text agrees
    mlm, tokenizer = load_masked_lm(base)
    texts = (tiny_data / "valid.txt").read_text().splitlines()
    independent = evaluate_texts(mlm, tokenizer, texts, 32, cfg.masking, cfg.masking.eval_seed, 8, torch.device("cpu"))
    assert evals[0]["eval_masked_tokens"] == independent.masked_tokens
    assert evals[0]["eval_ppl"] == pytest.approx(independent.perplexity, rel=1e-6)
    card = (final / "README.md").read_text()  # the card sets the base's own figure beside the checkpoint's
    assert f"| validation perplexity | {evals[-1]['eval_ppl']:.4f} (base: {evals[0]['eval_ppl']:.4f}) |" in card
    assert "| | |" not in card and "language" not in card.split("---")[1]  # headed tables; no language unstated
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(str(final))) == tokenizer_fingerprint(
        AutoTokenizer.from_pretrained(str(base))
    )
    saved = load_config(final / "mlmtrain.yaml")  # a checkpoint names its base; the run's own file keeps the path
    assert (saved.model.hidden_size, saved.model.max_position_embeddings, saved.model.init_from) == (
        32,
        POSITIONS,
        base.name,
    )
    assert load_config(tmp_path / "run" / "mlmtrain.yaml").model.init_from == str(base)
    assert json.loads((final / "config.json").read_text())["vocab_size"] == len(base_tokenizer())
    # the report's budget check does not judge a run that continues a pretrained model
    capsys.readouterr()
    with contextlib.suppress(SystemExit):  # exit 1 when another check fails
        cli_main(["report", str(tmp_path / "run"), "--check"])
    assert "n/a  tokens per parameter: the run continues" in capsys.readouterr().out


@pytest.mark.oldpins  # a continued run under the oldest transformers declared (4.54 once failed loading the base)
def test_an_init_from_run_resumes_exactly(base: Path, tiny_data: Path, tmp_path: Path) -> None:
    common = {"train.max_steps": 6, "train.eval_every": 3, "checkpoint.save_every": 3}
    whole = pretrain(load_config(None, continue_options(tiny_data, base, tmp_path / "whole", **common)))
    paused_cfg = load_config(
        None, continue_options(tiny_data, base, tmp_path / "paused", **common, **{"train.pause_after": 3})
    )
    assert pretrain(paused_cfg).name == "step-3"
    resumed_cfg = load_config(None, continue_options(tiny_data, base, tmp_path / "paused", **common))
    resumed = pretrain(resumed_cfg, resume="auto")
    assert step_losses(tmp_path / "paused" / "run") == step_losses(tmp_path / "whole" / "run")
    a, b = weights(whole), weights(resumed)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _domain_corpus(folder: Path) -> Path:
    """The tiny corpus with two words the base's tokenizer splits into letters (what tokenizer.extend_vocab adds)."""
    ordinary = write_corpus(folder / "ordinary.txt", 100, seed=3).read_text().splitlines()
    lines = [f"{line} Wonderland{' rabbit' if i % 2 else ''}." for i, line in enumerate(ordinary)]
    (folder / "new.txt").write_text("\n".join(lines) + "\n")
    return folder / "new.txt"


@pytest.mark.parametrize("head, extend", [("BertForMaskedLM", 0), ("BertForPreTraining", 3)])
def test_a_resume_reads_the_checkpoint_not_the_base_which_may_be_gone(
    head: str, extend: int, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The base's folder renamed away after the first checkpoint: --resume with the run's own mlmtrain.yaml takes
    the shape, tokenizer and pooler from the checkpoint (which keep_last prunes meanwhile) and ends as the
    uninterrupted run; a fresh run of the missing base is refused in one line."""
    import shutil

    from safetensors.torch import load_file

    base = write_base(tmp_path / "models" / "tiny-bert", head=head)
    original = load_file(str(base / "model.safetensors"))
    common = {
        "data.train": str(_domain_corpus(tmp_path)),
        "tokenizer.extend_vocab": extend,
        "train.max_steps": 9,
        "train.eval_every": 3,
        "checkpoint.save_every": 3,
        "checkpoint.keep_last": 1,
    }
    whole = pretrain(load_config(None, continue_options(tiny_data, base, tmp_path / "whole", **common)))
    paused = continue_options(tiny_data, base, tmp_path / "paused", **common, **{"train.pause_after": 3})
    assert pretrain(load_config(None, paused)).name == "step-3"
    base.rename(base.with_name("moved-away"))
    run = tmp_path / "paused" / "run"
    code, lines = run_cli(capsys, "pretrain", "--config", str(run / "mlmtrain.yaml"), "--resume", "auto")
    assert code == 0, lines
    assert step_losses(run) == step_losses(tmp_path / "whole" / "run")
    a, b = weights(whole), weights(run / "checkpoints" / "step-9")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    if head == "BertForPreTraining":  # the base's trained pooler, kept past the resume
        assert torch.equal(b["bert.pooler.dense.weight"], original["bert.pooler.dense.weight"])
    assert load_config(run / "mlmtrain.yaml").model.init_from == str(base)  # the run still names its base
    card = (run / "checkpoints" / "step-9" / "README.md").read_text()
    assert "base_model" not in card and "Continued from the local model `tiny-bert` (`model.init_from`)." in card
    if extend:
        assert "`tokenizer.extend_vocab` added 2 whole words" in card and "the run's `added_words.txt`" in card
    # a checkpoint whose save did not finish stands in for no base: refused by its own name
    half = shutil.copytree(run / "checkpoints" / "step-9", tmp_path / "half")
    (half / "COMPLETE").unlink()
    code, lines = run_cli(capsys, "pretrain", "--config", str(run / "mlmtrain.yaml"), "--resume", str(half))
    assert code == 2
    assert_one_error_line(lines, "checkpoint", "is not a complete checkpoint")
    fresh = continue_options(tiny_data, base, tmp_path / "fresh", **common)
    code, lines = run_cli(capsys, "pretrain", *[arg for pair in fresh for arg in ("--set", pair)])
    assert code == 2
    assert_one_error_line(lines, "config", f"model.init_from {base} does not exist")
    assert not (tmp_path / "fresh").exists()


def test_a_hub_base_is_named_in_the_card_and_a_resume_needs_neither_the_hub_nor_its_cache(
    monkeypatch: pytest.MonkeyPatch, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """model.init_from a Hub name, offline, from a cache of its own: the cards say `base_model: NAME`; with that
    cache gone too, --resume with the run's mlmtrain.yaml still finishes from the checkpoint."""
    import shutil

    import huggingface_hub.constants as hub_constants
    import yaml

    from mlmtrain.runtime import hub

    name, commit, cache = "someone/tiny-bert", "0" * 40, tmp_path / "hub-cache"
    repo = cache / "models--someone--tiny-bert"
    write_base(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.hub_model_folder.cache_clear()  # the folder a hub name resolves to is kept once a process
    common = {"train.max_steps": 4, "train.eval_every": 2, "checkpoint.save_every": 2}
    options = continue_options(tiny_data, name, tmp_path, **common, **{"train.pause_after": 2})
    assert pretrain(load_config(None, options)).name == "step-2"
    shutil.rmtree(cache)
    hub.hub_model_folder.cache_clear()
    run = tmp_path / "run"
    code, lines = run_cli(capsys, "pretrain", "--config", str(run / "mlmtrain.yaml"), "--resume", "auto")
    assert code == 0, lines
    for step in (2, 4):
        card = (run / "checkpoints" / f"step-{step}" / "README.md").read_text()
        assert yaml.safe_load(card.split("---\n")[1])["base_model"] == name
        assert f"Continued from [`{name}`](https://huggingface.co/{name})" in card


# ---------------------------------------------------------------------------------------------
# Bad input: exit 2, one line, nothing written


def _gpt2(folder: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)).save_pretrained(
        str(folder)
    )
    return folder


def _bare_encoder(folder: Path) -> Path:
    """A BertModel folder whose config.json names no architecture: only its weights show the missing head."""
    write_base(folder, head="BertModel")
    config = json.loads((folder / "config.json").read_text())
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


BAD_BASES = {
    "encoder-only": (_bare_encoder, "lack"),
    "missing": (lambda root: root / "no-such-model", "does not exist"),
    "classifier": (lambda root: write_base(root / "cls", head="BertForSequenceClassification"), "not a masked LM"),
    "gpt2": (_gpt2, "'gpt2' model"),
    "no-mask-token": (lambda root: write_base(root / "nomask", mask=False), "no mask token"),
}


@pytest.mark.parametrize("case", sorted(BAD_BASES))
def test_a_base_that_cannot_be_continued_is_refused(
    case: str, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    make, needle = BAD_BASES[case]
    folder = make(tmp_path)
    options = continue_options(tiny_data, folder, tmp_path)
    code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)])
    assert code == 2
    assert_one_error_line(lines, "model.init_from", needle)
    assert not (tmp_path / "run").exists() and not (tmp_path / "tokens").exists()


BAD_KEYS = {
    "shape": ({"model.hidden_size": 64}, "hidden_size=32, but model.hidden_size is 64"),
    "shape-at-its-default": ({"model.hidden_size": 256}, "hidden_size=32, but model.hidden_size is 256"),
    "positions": ({"data.seq_len": 128}, "beyond the 64 positions"),
    "new-vocabulary": ({"tokenizer.vocab_size": 500}, "would train a new WordPiece vocabulary"),
    "other-tokenizer": ({"tokenizer.pretrained": "bert-base-uncased"}, "drop tokenizer.pretrained"),
    "electra": ({"train.objective": "electra"}, "starting electra from an existing model is not supported"),
}


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_a_key_that_contradicts_the_base_is_refused(
    case: str, base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    extra, needle = BAD_KEYS[case]
    options = continue_options(tiny_data, base, tmp_path, **extra)
    code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)])
    assert code == 2
    assert_one_error_line(lines, "model.init_from" if case != "positions" else "data.seq_len", needle)
    assert not (tmp_path / "run").exists() and not (tmp_path / "tokens").exists()


def test_a_hub_name_offline_is_one_line(monkeypatch: pytest.MonkeyPatch, tiny_data: Path, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(None, continue_options(tiny_data, Path("someone/no-such-bert"), tmp_path))
    with pytest.raises(UserError, match="unreachable .*offline mode.* not in the local cache"):
        cfg = resolve_init_from(cfg).cfg


# ---------------------------------------------------------------------------------------------
# tokenizer.extend_vocab


def test_extend_vocab_adds_the_frequent_split_words_with_mean_initialised_rows(
    base: Path, tiny_data: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer, BertForMaskedLM

    from mlmtrain.data.store import tokenize_corpus
    from mlmtrain.runtime.distributed import init_distributed
    from mlmtrain.train.step import build_setup

    ordinary = write_corpus(tmp_path / "ordinary.txt", 100, seed=3).read_text().splitlines()
    # wonderland in every line, rabbit in every other, hatter once (too rare): two words split into letters today
    lines = [f"{line} Wonderland{' rabbit' if i % 2 else ''}." for i, line in enumerate(ordinary)] + ["The hatter."]
    (tmp_path / "new.txt").write_text("\n".join(lines) + "\n")
    extra = {"data.train": str(tmp_path / "new.txt"), "tokenizer.extend_vocab": 3, "train.max_steps": 2}
    cfg = load_config(None, continue_options(tiny_data, base, tmp_path, **extra))
    cfg = resolve_init_from(cfg).cfg
    tokenize_corpus(cfg, quiet=True)
    setup = build_setup(cfg, init_distributed("cpu"))
    base_tokenizer_, first_new = base_tokenizer(), len(base_tokenizer())
    extended = AutoTokenizer.from_pretrained(str(cfg.tokenizer_dir))
    assert extended("wonderland rabbit", add_special_tokens=False).input_ids == [first_new, first_new + 1]
    original = BertForMaskedLM.from_pretrained(str(base))
    rows, bias = setup.mlm.get_input_embeddings().weight, setup.mlm.cls.predictions.decoder.bias
    assert rows.shape[0] == first_new + 2 and setup.mlm.cls.predictions.decoder.weight is rows
    for offset, word in enumerate(["wonderland", "rabbit"]):
        pieces = base_tokenizer_(word, add_special_tokens=False).input_ids
        assert len(pieces) == len(word)
        expected = original.get_input_embeddings().weight[pieces].mean(0)
        assert torch.allclose(rows[first_new + offset], expected)
        assert torch.allclose(bias[first_new + offset], original.cls.predictions.decoder.bias[pieces].mean())
    assert torch.equal(rows[:first_new], original.get_input_embeddings().weight)  # the base's rows are untouched
    final = pretrain(cfg)
    assert (tmp_path / "run" / "added_words.txt").read_text().splitlines()[1:] == ["wonderland", "rabbit"]
    assert len(AutoTokenizer.from_pretrained(str(final))) == first_new + 2
    assert json.loads((final / "config.json").read_text())["vocab_size"] == first_new + 2
    # a resume keeps the extended tokenizer (it is current for this corpus) and the checkpoint's rows
    more = load_config(None, continue_options(tiny_data, base, tmp_path, **{**extra, "train.max_steps": 3}))
    assert pretrain(more, resume="auto").name == "step-3"


def test_extend_vocab_refuses_what_it_cannot_extend(
    base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    tokenizer = base_tokenizer()
    tokenizer.add_tokens(["<extra>"])  # a token beyond the WordPiece vocabulary: new ids would collide with it
    odd = write_base(tmp_path / "odd", tokenizer=tokenizer)
    for folder, extra, needle in (
        (odd, {"tokenizer.extend_vocab": 5}, "beyond its WordPiece vocabulary"),
        (None, {"tokenizer.extend_vocab": 5, "model.init_from": None}, "set model.init_from too"),
    ):
        options = continue_options(tiny_data, folder or base, tmp_path, **extra)
        code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)])
        assert code == 2
        assert_one_error_line(lines, "tokenizer", needle)
        assert not (tmp_path / "run").exists() and not (tmp_path / "tokens").exists()


# ---------------------------------------------------------------------------------------------
# A second phase at a longer data.seq_len


def test_a_longer_seq_len_is_a_second_phase_with_a_note_and_beyond_the_positions_is_refused(
    tiny_config, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    short = {"train.max_steps": 2, "train.eval_every": 0, "checkpoint.save_every": 0}
    first = pretrain(tiny_config(**short))  # an mlmtrain run at seq_len 32, positions 64
    capsys.readouterr()
    longer = {**short, "train.max_steps": 3, "data.seq_len": 64}
    pretrain(tiny_config(**longer), resume="auto")
    assert "second phase: data.seq_len 64, up from the 32" in capsys.readouterr().err
    # the same from the checkpoint as a base (model.init_from): its mlmtrain.yaml says it trained at 32
    options = continue_options(tiny_data, first, tmp_path / "again", **{**longer, "data.seq_len": 64})
    pretrain(load_config(None, options))
    assert "second phase: data.seq_len 64, up from the 32" in capsys.readouterr().err
    beyond = tiny_config(**{**longer, "train.max_steps": 4, "data.seq_len": 128, "model.max_position_embeddings": 128})
    # more positions than the checkpoint's is another model: the resume's shape check refuses it
    with pytest.raises(UserError, match="max_position_embeddings=64, the config says 128"):
        pretrain(beyond, resume="auto")


def test_a_base_with_a_pooler_keeps_it_in_every_checkpoint(tiny_data: Path, tmp_path: Path) -> None:
    """A BertForPreTraining base (as bert-base-uncased) has a trained pooler: the checkpoints keep it rather than a
    fresh one from the run's seed, so a classifier fine-tuned from them starts where one from the base would."""
    from safetensors.torch import load_file

    base = write_base(tmp_path / "pretraining-base", head="BertForPreTraining")
    pretrain(load_config(None, continue_options(tiny_data, base, tmp_path, **{"train.max_steps": 2})))
    saved = load_file(str(tmp_path / "run" / "checkpoints" / "step-2" / "model.safetensors"))
    original = load_file(str(base / "model.safetensors"))
    for name in ("bert.pooler.dense.weight", "bert.pooler.dense.bias"):
        assert torch.equal(saved[name], original[name]), name


def test_an_added_words_file_of_yours_is_never_replaced(
    base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """RUN_DIR/added_words.txt is mlmtrain's name for its list; a file of the user's there stays as it was."""
    (tmp_path / "new.txt").write_text("wonderland rabbit wonderland rabbit tea\n" * 20)
    (tmp_path / "run").mkdir()
    notes = tmp_path / "run" / "added_words.txt"
    notes.write_text("MY OWN NOTES\n")
    extra = {"data.train": str(tmp_path / "new.txt"), "tokenizer.extend_vocab": 3, "train.max_steps": 2}
    options = continue_options(tiny_data, base, tmp_path, **extra)
    code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)])
    assert code == 2
    assert_one_error_line(lines, "run", "is not the list of added words mlmtrain writes there")
    assert notes.read_text() == "MY OWN NOTES\n" and not (tmp_path / "tokens").exists()


@pytest.mark.parametrize("objective", ["electra", "mlm+nsp", "mlm+sop"])
def test_an_objective_other_than_mlm_is_refused_by_its_name(base: Path, objective: str) -> None:
    cfg = load_config(None, [f"model.init_from={base}", f"train.objective={objective}"])
    with pytest.raises(UserError, match=f"starting {objective.replace('+', '[+]')} from an existing model"):
        cfg = resolve_init_from(cfg).cfg


def test_a_resume_names_the_base_and_extension_it_changes_and_the_way_back_works(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Another tokenizer.extend_vocab on --resume would extend the base's tokenizer anew: refused, naming the change
    and a way that works (the run's own settings); a base copied elsewhere resumes, and the note names the move."""
    import shutil

    base = write_base(tmp_path / "models" / "tiny-bert")
    common = {"data.train": str(_domain_corpus(tmp_path)), "train.max_steps": 4, "checkpoint.save_every": 2}

    def resume(root: Path, base: Path, **extra: object) -> tuple[int, list[str]]:
        options = continue_options(tiny_data, base, root, **{**common, **extra})
        return run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)], "--resume", "auto")

    for root, extend in ((tmp_path / "extended", 3), (tmp_path / "plain", 0)):
        paused = continue_options(tiny_data, base, root, **common, **{"tokenizer.extend_vocab": extend})
        pretrain(load_config(None, [*paused, "train.pause_after=2"]))
    code, lines = resume(tmp_path / "extended", base, **{"tokenizer.extend_vocab": 1})
    assert code == 2
    saved = tmp_path / "extended" / "run" / "mlmtrain.yaml"
    assert_one_error_line(lines, "checkpoint", "(tokenizer.extend_vocab: 3 -> 1)")
    assert lines[-1].endswith(f"resume with that run's settings: --config {saved}")
    code, lines = run_cli(capsys, "pretrain", "--config", str(saved), "--resume", "auto")
    assert code == 0, lines

    moved = shutil.copytree(base, tmp_path / "elsewhere")
    code, lines = resume(tmp_path / "plain", moved)
    assert code == 0, lines
    (note,) = [line for line in lines if line.startswith("note: resuming with training settings")]
    assert f"model.init_from: 'tiny-bert' -> {moved}" in note  # a checkpoint names its base, holding no path
