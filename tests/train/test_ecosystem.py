"""Checkpoints as the ecosystem expects them: complete tokenizer files (slow tokenizers and transformers 4 read
vocab.txt), a pooler so every Auto* load is complete and repeatable, a model card whose figures are
checkpoint.json's, and `mlmtrain push` (what it would upload, and its one-line failures, never a real host)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from mlmtrain.cli.app import main
from mlmtrain.config import load_config
from mlmtrain.data.tokenizer import copy_tokenizer, load_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.model.pooler import add_pooler, pooler_tensors
from mlmtrain.tools.push import publishable_files
from mlmtrain.train.checkpoint import load_training_state, save_checkpoint
from mlmtrain.train.loop import pretrain
from mlmtrain.train.model_card import CARD, write_model_card

from ..helpers import free_port, tiny_overrides

TOKENIZER_FILES = ("vocab.txt", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json")
TEXT = "The quick brown fox jumps over a lazy dog, Über-quartz!"
MLM_FILES = [
    "README.md",
    "config.json",
    "mlmtrain.yaml",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
]


def _config(tiny_data: Path, run_dir: Path, **extra: object):
    values = {"train.run_dir": str(run_dir), "train.max_steps": 4, "train.eval_every": 2, "checkpoint.save_every": 2}
    return load_config(None, tiny_overrides(tiny_data, **{**values, **extra}))


@pytest.fixture(scope="module")
def run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step MLM run (checkpoints at steps 2 and 4); tests copy what they change."""
    run_dir = tmp_path_factory.mktemp("eco") / "run"
    pretrain(_config(tiny_data, run_dir))
    return run_dir


@pytest.fixture(scope="module")
def electra_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("eco-electra") / "run"
    pretrain(_config(tiny_data, run_dir, **{"train.objective": "electra", "train.max_steps": 2}))
    return run_dir


def _step(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step}"


def _slow_tokenizer_class():
    """The pure-Python BERT tokenizer, which reads vocab.txt alone: BertTokenizerLegacy in transformers 5,
    BertTokenizer in transformers 4."""
    import transformers

    return getattr(transformers, "BertTokenizerLegacy", None) or transformers.BertTokenizer


def _ids(tokenizer) -> list[int]:
    return tokenizer(TEXT, "a second segment")["input_ids"]


# ---------------------------------------------------------------------------------------------
# 1. tokenizer files


def _assert_complete_tokenizer(folder: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, BertTokenizer

    for name in TOKENIZER_FILES:
        assert (folder / name).is_file(), f"{folder} lacks {name}"
    fast = AutoTokenizer.from_pretrained(str(folder))
    assert fast.is_fast
    mask = json.loads((folder / "special_tokens_map.json").read_text())["mask_token"]
    assert (mask if isinstance(mask, str) else mask["content"]) == "[MASK]"  # transformers 4 adds the token's settings
    # without tokenizer.json every loader has to build the vocabulary from vocab.txt: it must be the same one
    vocab_only = tmp_path / f"vocab-only-{folder.name}"
    vocab_only.mkdir()
    for name in ("vocab.txt", "special_tokens_map.json", "tokenizer_config.json"):
        shutil.copy(folder / name, vocab_only / name)
    for source in (folder, vocab_only):
        for tokenizer in (
            _slow_tokenizer_class().from_pretrained(str(source)),
            BertTokenizer.from_pretrained(str(source)),
            AutoTokenizer.from_pretrained(str(source), use_fast=False),
        ):
            assert _ids(tokenizer) == _ids(fast), (source, type(tokenizer).__name__)


def test_every_checkpoint_folder_holds_the_complete_tokenizer_files(run: Path, tmp_path: Path) -> None:
    for step in (2, 4):
        _assert_complete_tokenizer(_step(run, step), tmp_path)


def test_the_electra_generator_folder_holds_them_too(electra_run: Path, tmp_path: Path) -> None:
    _assert_complete_tokenizer(_step(electra_run, 2) / "generator", tmp_path)


def test_a_copied_tokenizer_and_the_probes_saved_model_hold_them(run: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    from mlmtrain.tools.probe import save_model

    tokenizer = load_tokenizer(_step(run, 4))
    copy_tokenizer(tokenizer, tmp_path / "copied", {"source": "test"})
    _assert_complete_tokenizer(tmp_path / "copied", tmp_path)
    classifier = AutoModelForSequenceClassification.from_pretrained(str(_step(run, 4)), num_labels=2)
    save_model(classifier, tokenizer, tmp_path / "finetuned")
    _assert_complete_tokenizer(tmp_path / "finetuned", tmp_path)
    before = (tmp_path / "finetuned" / "model.safetensors").read_bytes()
    assert add_pooler(tmp_path / "finetuned", seed=0) is False  # a fine-tuned classifier has its own pooler
    assert (tmp_path / "finetuned" / "model.safetensors").read_bytes() == before


# ---------------------------------------------------------------------------------------------
# 3. pooler


def _loaded(auto, folder: Path, seed: int):
    torch.manual_seed(seed)  # a load that initialised anything at random would differ between the two seeds
    return auto.from_pretrained(str(folder), output_loading_info=True)


def test_every_auto_load_is_complete_and_two_loads_are_identical(run: Path) -> None:
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

    folder = _step(run, 4)
    for auto, new in (
        (AutoModel, set()),
        (AutoModelForSequenceClassification, {"classifier.weight", "classifier.bias"}),
    ):
        (first, info), (second, _) = _loaded(auto, folder, 1), _loaded(auto, folder, 2)
        assert set(info["missing_keys"]) == new, auto.__name__
        a, b = first.state_dict(), second.state_dict()
        for key in a:
            if not key.startswith("classifier."):
                assert torch.equal(a[key], b[key]), (auto.__name__, key)
    masked_lm, info = _loaded(AutoModelForMaskedLM, folder, 1)
    assert type(masked_lm).__name__ == "BertForMaskedLM"
    assert not info["missing_keys"]
    # the pooler is the one weight a masked-LM load does not use (both transformers 4 and 5 list it as unused)
    assert set(info["unexpected_keys"]) <= {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}


def test_the_pooler_is_drawn_from_the_runs_seed_the_same_at_every_save(run: Path) -> None:
    two, four = load_file(str(_step(run, 2) / "model.safetensors")), load_file(str(_step(run, 4) / "model.safetensors"))
    shapes = {"pooler.dense.weight": torch.Size([32, 32]), "pooler.dense.bias": torch.Size([32])}
    expected = pooler_tensors(shapes, 0.02, seed=0, dtype=torch.float32)
    for name, value in expected.items():
        assert torch.equal(two[f"bert.{name}"], value) and torch.equal(four[f"bert.{name}"], value), name
    assert not torch.equal(
        expected["pooler.dense.weight"], pooler_tensors(shapes, 0.02, 1, torch.float32)["pooler.dense.weight"]
    )
    assert two["bert.pooler.dense.weight"].std() == pytest.approx(0.02, rel=0.2)


def test_a_sharded_folder_gets_its_pooler_in_a_shard_of_its_own(tmp_path: Path) -> None:
    from transformers import AutoModel, BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    BertForMaskedLM(config).save_pretrained(str(tmp_path), max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    assert add_pooler(tmp_path, seed=3) is True
    (first, info), (second, _) = _loaded(AutoModel, tmp_path, 1), _loaded(AutoModel, tmp_path, 2)
    assert not info["missing_keys"]
    assert torch.equal(first.pooler.dense.weight, second.pooler.dense.weight)
    assert add_pooler(tmp_path, seed=3) is False


def test_the_electra_discriminator_gets_no_pooler(electra_run: Path) -> None:
    for folder in (_step(electra_run, 2), _step(electra_run, 2) / "generator"):
        assert not [name for name in load_file(str(folder / "model.safetensors")) if "pooler" in name]


# ---------------------------------------------------------------------------------------------
# 4. model card


def _front_matter(card: Path) -> dict:
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text[4 : text.index("\n---\n")])


def _row(card: Path, name: str) -> str:
    """The value in the card's table row `| name | value |`."""
    rows = [line for line in card.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {name} |")]
    assert len(rows) == 1, (name, rows)
    return rows[0].split("|")[2].strip()


def test_every_checkpoint_has_a_model_card_whose_figures_are_checkpoint_jsons(run: Path) -> None:
    evals = {
        record["step"]: record
        for record in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "eval_loss" in record
    }
    for step in (2, 4):
        card = _step(run, step) / CARD
        meta = _front_matter(card)
        assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "fill-mask"
        assert meta["license"] == "other" and meta["tags"] == ["mlmtrain", "bert", "fill-mask"]
        assert "datasets" not in meta and "language" not in meta  # local files: nothing to claim
        saved = json.loads((_step(run, step) / "checkpoint.json").read_text())
        assert CARD in saved["files"]  # listed as mlmtrain's own file
        assert _row(card, "steps") == f"{saved['step']:,}"
        assert _row(card, "tokens") == f"{saved['tokens']:,}"
        assert _row(card, "validation loss") == f"{saved['eval_loss']:.4f}"
        assert _row(card, "validation perplexity") == f"{evals[step]['eval_ppl']:.4f}"
        assert _row(card, "validation accuracy (masked tokens)") == f"{evals[step]['eval_acc']:.4f}"
        assert (
            _row(card, "layers") == "2" and _row(card, "hidden size") == "32" and _row(card, "attention heads") == "2"
        )
        assert "```yaml\ndata:\n" in card.read_text()


def test_the_card_takes_license_language_and_hub_datasets_from_the_config(run: Path, tiny_data: Path, tmp_path) -> None:
    folder = shutil.copytree(_step(run, 4), tmp_path / "step-4")
    cfg = _config(tiny_data, run, **{"checkpoint.license": "mit", "checkpoint.language": "[en, de]"})
    cfg.data.train = ["hf:wikitext/wikitext-2-raw-v1:train", "hf:org/corpus/default:train"]
    write_model_card(folder, cfg, 4, {"tokens": 1024, "eval_loss": None}, {}, run)
    meta = _front_matter(folder / CARD)
    assert (meta["license"], meta["language"], meta["datasets"]) == ("mit", ["en", "de"], ["wikitext", "org/corpus"])
    assert "At step 4" not in (folder / CARD).read_text()  # an eval at this step, from metrics.jsonl
    with pytest.raises(UserError, match=r"checkpoint\.license"):
        load_config(None, ["checkpoint.license=Apache 2"])


def test_the_card_of_a_continued_run_names_its_base_a_hub_id_in_the_front_matter_a_folder_by_its_name(
    run: Path, tiny_data: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(_step(run, 4), tmp_path / "step-4")
    hub, local = "google/bert_uncased_L-2_H-128_A-2", tmp_path / "models" / "my-base"
    cards = {}
    for base in (hub, str(local)):
        cfg = _config(tiny_data, run)
        cfg.model.init_from = base
        write_model_card(folder, cfg, 4, {"tokens": 1024, "eval_loss": None}, {}, run)
        cards[base] = (folder / CARD).read_text(encoding="utf-8")
    assert _front_matter(folder / CARD).get("base_model") is None  # the Hub takes a repository id, not a path
    assert "Continued from the local model `my-base` (`model.init_from`)." in cards[str(local)]
    assert str(local) not in cards[str(local)].split("## Config")[0]  # the path stays in the config section only
    assert _front_matter(folder / CARD) != {} and "base_model: " + hub in cards[hub].split("\n---\n")[0]
    assert f"Continued from [`{hub}`](https://huggingface.co/{hub}) (`model.init_from`)." in cards[hub]
    assert "extend_vocab" not in cards[hub].split("## Config")[0]  # no words added: nothing said


def test_the_card_shows_this_runs_last_scores_not_those_of_an_earlier_run_it_resumed(
    run: Path, tiny_data: Path, tmp_path: Path
) -> None:
    folder = shutil.copytree(_step(run, 4), tmp_path / "step-4")
    history = [
        {"step": 2, "eval_loss": 1.0, "eval_ppl": 2.7183, "eval_acc": 0.25},
        {"step": 2, "probe_acc": 0.5, "probe_f1": 0.4, "probe_seconds": 1.0},
        {"step": 4, "eval_loss": 0.5, "eval_ppl": 1.6487, "eval_acc": 0.5},  # the earlier run, later replaced
        {"step": 6, "loss": 0.1},
        {"step": 3, "loss": 0.9},  # resumed from step 2
        {"step": 4, "loss": 0.8},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in history))
    cfg = _config(tiny_data, tmp_path, **{"probe.task": str(tmp_path / "task"), "probe.max_length": 64})
    write_model_card(folder, cfg, 4, {"tokens": 1024, "eval_loss": None}, {}, tmp_path)
    card = folder / CARD
    assert _row(card, "validation loss") == "1.0000" and _row(card, "validation accuracy (masked tokens)") == "0.2500"
    assert _row(card, "probe accuracy") == "0.5000" and "probe_seconds" not in card.read_text()
    assert card.read_text().count("At step 2 ") == 2 and _row(card, "training time") == "n/a"


def test_the_card_of_an_electra_run_says_what_it_is(electra_run: Path) -> None:
    meta = _front_matter(_step(electra_run, 2) / CARD)
    assert meta["pipeline_tag"] == "feature-extraction" and meta["tags"] == ["mlmtrain", "electra"]


def _save_again(run_dir: Path, step: int, tiny_data: Path) -> Path:
    """save_checkpoint of step `step` once more, as a run resumed at its last step does."""
    from transformers import BertForMaskedLM

    folder = _step(run_dir, step)
    model = BertForMaskedLM.from_pretrained(str(folder))
    saved = json.loads((folder / "checkpoint.json").read_text())
    metrics = {"tokens": saved["tokens"], "eval_loss": saved["eval_loss"]}
    state = load_training_state(folder)
    return save_checkpoint(run_dir, step, model, load_tokenizer(folder), _config(tiny_data, run_dir), state, metrics)


def test_a_card_the_user_edited_is_never_replaced(run: Path, tiny_data: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(run, tmp_path / "run", symlinks=True)
    card = _step(copy, 4) / CARD
    copied = card.stat().st_mtime_ns
    _save_again(copy, 4, tiny_data)  # mlmtrain's own card: written afresh
    before = card.read_text()
    assert card.stat().st_mtime_ns != copied and "run_dir: run\n" in before
    card.write_text(before.replace("A 2-layer", "My notes: a 2-layer"))
    with pytest.raises(UserError, match=r"holds files mlmtrain did not write \(README.md changed since saved\)"):
        _save_again(copy, 4, tiny_data)
    assert card.read_text().count("My notes") == 1


# ---------------------------------------------------------------------------------------------
# 5. push


def _push(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["push", *args])
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_push_dry_run_lists_exactly_the_publishable_files(run: Path, electra_run: Path, capsys) -> None:
    code, out, err = _push(capsys, str(run / "checkpoints" / "latest"), "--repo", "someone/tiny", "--dry-run")
    assert code == 0
    assert out.splitlines() == MLM_FILES
    assert "left out: COMPLETE, checkpoint.json, training_state.pt" in err
    generator = [f"generator/{name}" for name in MLM_FILES if name not in ("README.md", "mlmtrain.yaml")]
    assert publishable_files(_step(electra_run, 2)) == sorted(MLM_FILES + generator)


@pytest.fixture
def fake_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture
def denying_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """HF_ENDPOINT on 127.0.0.1 that answers every request 401; yields the requests it saw."""
    seen: list[str] = []

    class Deny(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            body = b'{"error": "Invalid credentials in Authorization header"}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Deny)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield seen
    server.shutdown()
    server.server_close()


def test_push_offline_or_without_a_token_is_one_line(run: Path, capsys, monkeypatch, tmp_path: Path) -> None:
    import huggingface_hub.constants

    latest = str(run / "checkpoints" / "latest")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    code, out, err = _push(capsys, latest, "--repo", "someone/tiny")
    assert (code, out, err.count("\n")) == (2, "", 1) and "no Hugging Face token" in err
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = _push(capsys, latest, "--repo", "someone/tiny")
    assert (code, err.count("\n")) == (2, 1) and "HF_HUB_OFFLINE is set" in err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    code, out, err = _push(capsys, latest, "--repo", "someone/tiny")
    assert (code, err.count("\n")) == (2, 1) and "unreachable" in err and "refused" in err.lower()


def test_push_reaches_the_hub_call_and_its_refusal_is_one_line(run: Path, capsys, fake_token, denying_hub) -> None:
    code, out, err = _push(capsys, str(run / "checkpoints" / "latest"), "--repo", "someone/tiny", "--private")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "could not push to someone/tiny" in err and "401" in err
    assert "POST /api/repos/create" in denying_hub


def test_a_password_in_hf_endpoint_is_never_printed(
    run: Path, capsys, fake_token, denying_hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", os.environ["HF_ENDPOINT"].replace("http://", "http://user:s3cret@"))
    code, out, err = _push(capsys, str(run / "checkpoints" / "latest"), "--repo", "someone/tiny")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "could not push to someone/tiny" in err and "401" in err
    assert "s3cret" not in err and "hf_not_a_real_token" not in err
    assert "POST /api/repos/create" in denying_hub


def _fake_hub(monkeypatch: pytest.MonkeyPatch) -> dict:
    """HfApi's repository and commit calls answered here, never by a host: what a real push would commit."""
    from huggingface_hub import HfApi, RepoUrl

    calls: dict = {}
    monkeypatch.setattr("mlmtrain.tools.push.hub_unreachable", lambda: None)

    def create_repo(self, repo_id: str, **kwargs: object) -> RepoUrl:
        calls["repo"] = (repo_id, kwargs["private"])
        return RepoUrl(f"https://huggingface.co/someone/{repo_id.split('/')[-1]}")

    def create_commit(self, repo_id: str, operations: list, **kwargs: object) -> None:
        calls["files"] = [operation.path_in_repo for operation in operations]
        calls["contents"] = [Path(operation.path_or_fileobj).read_bytes() for operation in operations]

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return calls


def test_push_commits_exactly_the_dry_run_files(run: Path, capsys, fake_token, monkeypatch) -> None:
    calls = _fake_hub(monkeypatch)
    code, _, err = _push(capsys, str(run / "checkpoints" / "latest"), "--repo", "tiny", "--private")
    assert code == 0, err
    assert (calls["repo"], calls["files"]) == (("tiny", True), MLM_FILES)


def test_push_refuses_what_is_not_a_finished_model_folder(run: Path, capsys, tmp_path: Path) -> None:
    unfinished = shutil.copytree(_step(run, 4), tmp_path / "step-4")
    (unfinished / "COMPLETE").unlink()
    for folder, needle in (
        (unfinished, "unfinished checkpoint"),
        (run, "is a run folder"),
        (tmp_path / "nothing", "does not exist"),
    ):
        code, out, err = _push(capsys, str(folder), "--repo", "someone/tiny", "--dry-run")
        assert (code, out, err.count("\n")) == (2, "", 1) and needle in err, err
    code, _, err = _push(capsys, str(_step(run, 4)), "--repo", "not a name", "--dry-run")
    assert code == 2 and "not a Hub repository name" in err


def test_a_checkpoint_holds_no_path_of_this_machine_and_a_resume_still_reads_it(
    tiny_data: Path, tmp_path: Path, capsys, fake_token, monkeypatch
) -> None:
    """A run of a local base whose files and folders all lie under tmp_path (the corpus by a glob): no file of its
    checkpoints, nor anything push commits, holds a path of this machine; mlmtrain.yaml and the card name them.
    --resume with the run's mlmtrain.yaml, the base moved away, still finds the base in the checkpoint by name and
    notes no changed setting."""
    from ..helpers import copy_corpus, run_cli
    from .test_init_from import continue_options, write_base

    corpus = copy_corpus(tiny_data, tmp_path)
    base = write_base(tmp_path / "models" / "tiny-bert")
    common = {"data.train": str(corpus / "train*.txt"), "train.max_steps": 4, "train.eval_every": 2}
    assert pretrain(load_config(None, continue_options(corpus, base, tmp_path, **common, **{"train.pause_after": 2})))
    base.rename(base.with_name("moved-away"))
    run = tmp_path / "run"
    code, lines = run_cli(capsys, "pretrain", "--config", str(run / "mlmtrain.yaml"), "--resume", "auto")
    assert code == 0 and not [line for line in lines if line.startswith("note:")], lines
    paths = {str(tmp_path).encode(), str(tmp_path.resolve()).encode()}
    for step in (2, 4):
        for path in _step(run, step).rglob("*"):
            assert not any(p in path.read_bytes() for p in paths), path
    saved = yaml.safe_load((_step(run, 4) / "mlmtrain.yaml").read_text())
    assert saved["data"]["train"] == "data/train*.txt" and saved["model"]["init_from"] == "tiny-bert"
    assert (saved["tokenizer"]["path"], saved["data"]["store"], saved["train"]["run_dir"]) == (
        "tokenizer",
        "tokens",
        "run",
    )
    assert "- training: `data/train*.txt`\n" in (_step(run, 4) / CARD).read_text()
    calls = _fake_hub(monkeypatch)
    code, _, err = _push(capsys, str(run / "checkpoints" / "latest"), "--repo", "tiny")
    assert code == 0 and calls["files"] == MLM_FILES, err
    assert not any(p in content for p in paths for content in calls["contents"])


def test_push_refuses_a_checkpoint_whose_config_names_a_path(run: Path, capsys, tmp_path: Path) -> None:
    """An older mlmtrain wrote paths into a checkpoint's mlmtrain.yaml (and card): push refuses it in one line."""
    older = shutil.copytree(_step(run, 4), tmp_path / "step-4")
    saved = yaml.safe_load((older / "mlmtrain.yaml").read_text())
    saved["data"]["train"] = str(tmp_path / "corpus" / "train.txt")
    (older / "mlmtrain.yaml").write_text(yaml.safe_dump(saved))
    code, out, err = _push(capsys, str(older), "--repo", "someone/tiny", "--dry-run")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert f"names a path of this machine (data.train: {tmp_path}/corpus/train.txt)" in err and "(train.txt)" in err


@pytest.mark.parametrize("link", ["config.json", "README.md", "generator"])
def test_push_and_its_dry_run_refuse_a_folder_holding_a_link_alike(
    link: str, run: Path, capsys, fake_token, monkeypatch, tmp_path: Path
) -> None:
    """A link in the folder (to a file of its own, to a file outside it, to a folder): the dry run and the push
    refuse it in the same line, naming the link and `cp -rL`, and nothing is committed. The folder named may be a
    link itself (as checkpoints/latest is): the dry run lists exactly what the push commits."""
    calls = _fake_hub(monkeypatch)
    folder = shutil.copytree(_step(run, 4), tmp_path / "copy")
    mine = tmp_path / "mine"
    mine.symlink_to(folder)
    code, out, _ = _push(capsys, str(mine), "--repo", "tiny", "--dry-run")
    assert code == 0 and out.splitlines() == MLM_FILES
    assert _push(capsys, str(mine), "--repo", "tiny")[0] == 0 and calls.pop("files") == MLM_FILES
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if link == "config.json":
        (folder / "config.json").rename(folder / "model-config.json")
        (folder / "config.json").symlink_to("model-config.json")
    elif link == "README.md":
        (folder / "README.md").rename(outside / "README.md")
        (folder / "README.md").symlink_to(outside / "README.md")
    else:
        (folder / "generator").symlink_to(outside)
    answers = [_push(capsys, str(mine), "--repo", "tiny", *dry) for dry in (["--dry-run"], [])]
    for code, out, err in answers:
        assert (code, out, err.count("\n")) == (2, "", 1), err
        assert f"{mine}/{link} is a link" in err and "cp -rL" in err
    assert answers[0][2] == answers[1][2] and "files" not in calls
