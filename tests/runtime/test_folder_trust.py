"""A model or tokenizer folder is read as data, never run: a folder that asks for code of its own is refused in one
line before transformers opens it (so no prompt, even with `y` waiting on stdin), nothing mlmtrain writes points at
code, every loader in the source passes trust_remote_code=False, config.json is read by typed keys, and a sharded
index may name files inside its folder only.
"""

from __future__ import annotations

import ast
import io
import json
import shutil
from pathlib import Path

import pytest

from ..helpers import assert_one_error_line, copy_corpus, run_cli, set_options
from ..train.test_init_from import continue_options, write_base

ROOT = Path(__file__).resolve().parents[2]


def _set(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def _edit_json(path: Path, **changes: object) -> None:
    settings = json.loads(path.read_text())
    settings.update(changes)
    path.write_text(json.dumps(settings))


@pytest.fixture(scope="module")
def plain_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT masked LM and its tokenizer, written by plain transformers."""
    return write_base(tmp_path_factory.mktemp("plain") / "base")


@pytest.fixture
def base(plain_base: Path, tmp_path: Path) -> Path:
    """A copy of the tiny base, for a test to damage."""
    return shutil.copytree(plain_base, tmp_path / "base")


# ---------------------------------------------------------------------------------------------
# A folder that asks for its own code


CODE = """open({marker!r}, "w").write("ran")
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
class CustomConfig(BertConfig):
    model_type = "custombert"
class CustomModel(BertForMaskedLM):
    config_class = CustomConfig
class CustomTokenizer(BertTokenizerFast):
    pass
"""


def _with_code(base: Path, variant: str, marker: Path) -> Path:
    """`base` with a custom.py that writes `marker` when imported, and the auto_map that names it."""
    (base / "custom.py").write_text(CODE.format(marker=str(marker)))
    if variant == "model":
        auto_map = {"AutoConfig": "custom.CustomConfig", "AutoModel": "custom.CustomModel"}
        _edit_json(base / "config.json", model_type="custombert", auto_map=auto_map)
        return base / "config.json"
    auto_map = {"AutoTokenizer": [None, "custom.CustomTokenizer"]}
    _edit_json(base / "tokenizer_config.json", tokenizer_class="CustomTokenizer", auto_map=auto_map)
    return base / "tokenizer_config.json"


# every command that loads a model or a tokenizer; {base} the folder, {root} a scratch folder with the tiny corpus
LOADING_COMMANDS = {
    "mask-demo --tokenizer": ["mask-demo", "--tokenizer", "{base}", "a quick brown fox"],
    "tokenize --tokenizer": ["tokenize", "--tokenizer", "{base}", "{options}"],
    "pretrain tokenizer.pretrained": ["pretrain", "{options}", "--set", "tokenizer.pretrained={base}"],
    "pretrain model.init_from": ["pretrain", "{continue}"],
    "fill-mask --model": ["fill-mask", "--model", "{base}", "--device", "cpu"],
    "eval-perplexity --model": ["eval-perplexity", "--model", "{base}", "--data", "{valid}", "--seq-len", "32"],
    "probe --model": ["probe", "--model", "{base}", "--task", "{root}/task", "--device", "cpu"],
}


def _command(name: str, base: Path, root: Path) -> list[str]:
    filled = {
        "{options}": set_options(root, root / "run"),
        "{continue}": _set(continue_options(root, base, root)),
    }
    args = []
    for arg in LOADING_COMMANDS[name]:
        args.extend(filled[arg] if arg in filled else [arg.format(base=base, root=root, valid=root / "valid.txt")])
    return args


@pytest.mark.parametrize("variant", ["model", "tokenizer"])
@pytest.mark.parametrize("command", LOADING_COMMANDS)
def test_a_folder_asking_for_its_code_is_refused_in_one_line_even_when_stdin_says_yes(
    command: str,
    variant: str,
    base: Path,
    tiny_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "the-folders-code-ran"
    named = _with_code(base, variant, marker)
    root = copy_corpus(tiny_data, tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # the answer transformers' prompt would take
    try:
        code, lines = run_cli(capsys, *_command(command, base, root))
    finally:
        assert not marker.exists(), "the folder's code ran"
    assert code == 2
    assert_one_error_line(lines, str(named), "auto_map", "never runs")
    assert not (root / "tokenizer").exists()  # no tokenizer folder (nor its auto_map) copied into the run's


def test_a_model_type_or_tokenizer_class_transformers_does_not_know_is_refused(
    base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Without an auto_map too: such a folder was written to be loaded with code of its own."""
    _edit_json(base / "tokenizer_config.json", tokenizer_class="CustomTokenizer")
    code, lines = run_cli(capsys, "mask-demo", "--tokenizer", str(base), "a quick brown fox")
    assert code == 2
    assert_one_error_line(lines, f"{base / 'tokenizer_config.json'} has tokenizer_class 'CustomTokenizer'", "never")
    _edit_json(base / "tokenizer_config.json", tokenizer_class="BertTokenizerFast")
    _edit_json(base / "config.json", model_type="custombert")
    code, lines = run_cli(capsys, *_eval_perplexity(base, tiny_data, tmp_path))
    assert code == 2
    assert_one_error_line(
        lines, f"{base / 'config.json'} has model_type 'custombert', which transformers does not know"
    )


def test_a_tokenizer_mlmtrain_saves_carries_no_auto_map(base: Path, tmp_path: Path) -> None:
    """A tokenizer loaded (without its code) from a folder with an auto_map keeps it in its settings, which
    save_pretrained writes back: what mlmtrain writes (run tokenizer, checkpoints, extend_vocab) drops it."""
    import transformers

    from mlmtrain.data.tokenizer import save_tokenizer_files

    _edit_json(base / "tokenizer_config.json", auto_map={"AutoTokenizer": [None, "custom.CustomTokenizer"]})
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(base), trust_remote_code=False)
    save_tokenizer_files(tokenizer, tmp_path / "saved")
    assert "auto_map" not in json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    assert not list((tmp_path / "saved").glob("*.py"))


# ---------------------------------------------------------------------------------------------
# Every loader in the source passes trust_remote_code=False


HELPER = "mlmtrain.runtime.model_folder"  # its from_pretrained(loader, source) passes trust_remote_code=False


def _loader_name(call: ast.Call, helper_imported: bool) -> str | None:
    """The transformers loader `call` makes (X.from_pretrained, X.from_config, pipeline), None for anything else
    and for the helper's from_pretrained."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("from_pretrained", "from_config", "pipeline"):
        return call.func.attr
    name = getattr(call.func, "id", None)
    if name == "pipeline" or (name == "from_pretrained" and not helper_imported):
        return name
    return None


def _unguarded_loader_calls() -> list[str]:
    found = []
    for path in sorted([*(ROOT / "src" / "mlmtrain").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        helper_imported = any(
            isinstance(node, ast.ImportFrom)
            and node.module == HELPER
            and "from_pretrained" in {a.name for a in node.names}
            for node in ast.walk(tree)
        )
        for node in ast.walk(tree):
            name = _loader_name(node, helper_imported) if isinstance(node, ast.Call) else None
            if name is None:
                continue
            guarded = any(
                k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords
            )
            if not guarded:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {name} without trust_remote_code=False")
    return found


def test_every_loader_call_passes_trust_remote_code_false() -> None:
    """mlmtrain loads through runtime/model_folder.from_pretrained, whose one call passes it; any other call of a
    transformers loader must pass it too, or a folder's code could run (or be offered on stdin)."""
    assert _unguarded_loader_calls() == []


# ---------------------------------------------------------------------------------------------
# config.json read by typed keys


READ_KEYS = [
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
]


def _eval_perplexity(base: Path, tiny_data: Path, tmp_path: Path) -> list[str]:
    valid = str(tiny_data / "valid.txt")
    return ["eval-perplexity", "--model", str(base), "--data", valid, "--seq-len", "32", "--device", "cpu"]


def _init_from(base: Path, tiny_data: Path, tmp_path: Path) -> list[str]:
    return ["pretrain", *_set(continue_options(copy_corpus(tiny_data, tmp_path), base, tmp_path))]


COMMANDS = {"eval-perplexity": _eval_perplexity, "init_from": _init_from}


def _run(command: str, base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> list[str]:
    """`mlmtrain COMMAND` on `base`: it fails with exit 2 and starts no run."""
    code, lines = run_cli(capsys, *COMMANDS[command](base, tiny_data, tmp_path))
    assert code == 2, lines
    assert not (tmp_path / "run").exists()
    return lines


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("key", READ_KEYS)
def test_a_config_json_missing_a_key_mlmtrain_reads_names_the_file_and_the_key(
    key: str, command: str, base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    settings = json.loads((base / "config.json").read_text())
    del settings[key]
    (base / "config.json").write_text(json.dumps(settings))
    lines = _run(command, base, tiny_data, tmp_path, capsys)
    assert_one_error_line(lines, f"{base / 'config.json'} has no {key}")


MISTYPED = {"hidden_size": "x", "num_attention_heads": 2.5, "vocab_size": [1], "hidden_dropout_prob": "high"}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("key", MISTYPED)
def test_a_config_json_key_of_the_wrong_type_names_the_file_and_the_key(
    key: str, command: str, base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _edit_json(base / "config.json", **{key: MISTYPED[key]})
    lines = _run(command, base, tiny_data, tmp_path, capsys)
    assert_one_error_line(lines, f"{base / 'config.json'}: {key} must be")


INCONSISTENT = {
    "hidden_size": (33, "hidden_size 33 is not a multiple of num_attention_heads 2"),
    "intermediate_size": (128, "do not have the shapes its config.json describes"),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("key", INCONSISTENT)
def test_a_config_json_inconsistent_with_itself_or_the_weights_says_so(
    key: str, command: str, base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    value, said = INCONSISTENT[key]
    _edit_json(base / "config.json", **{key: value})
    lines = _run(command, base, tiny_data, tmp_path, capsys)
    line = assert_one_error_line(lines, said, "not a valid model")
    assert "truncated or corrupt" not in line


# ---------------------------------------------------------------------------------------------
# A sharded index names files inside its folder only


def _escaping_shard(base: Path, how: str, outside: Path) -> None:
    """Save `base` sharded, then point its index's first shard outside the folder (a copy of it lies there)."""
    from transformers import BertForMaskedLM

    BertForMaskedLM.from_pretrained(str(base), trust_remote_code=False).save_pretrained(
        str(base), max_shard_size="40KB"
    )
    (base / "model.safetensors").unlink(missing_ok=True)
    index = json.loads((base / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    outside.mkdir()
    shutil.copy(base / shard, outside / shard)
    if how == "symlink":
        (base / shard).unlink()
        (base / shard).symlink_to(outside / shard)
        return
    named = f"../{outside.name}/{shard}" if how == "dotdot" else str(outside / shard)
    index["weight_map"] = {k: named if v == shard else v for k, v in index["weight_map"].items()}
    (base / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_shard_index_pointing_outside_the_folder_is_refused(
    how: str, command: str, base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _escaping_shard(base, how, tmp_path / "elsewhere")
    lines = _run(command, base, tiny_data, tmp_path, capsys)
    line = assert_one_error_line(lines, str(base / "model.safetensors.index.json"), "outside", "its own folder only")
    assert "truncated or corrupt" not in line


def test_the_weights_fingerprint_is_the_content_of_the_weights_not_the_folders_name(
    plain_base: Path, tmp_path: Path
) -> None:
    """One fingerprint for a copy under another name, a link and the same model saved as shards; another for one
    value changed; a pickle-only folder's file hashed as bytes, never loaded."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForMaskedLM

    from mlmtrain.runtime.model_folder import weights_fingerprint, weights_parameter_count

    fingerprint = weights_fingerprint(plain_base)
    assert fingerprint.startswith("sha256:") and len(fingerprint) == 7 + 64
    copy = Path(shutil.copytree(plain_base, tmp_path / "another-name"))
    (tmp_path / "link").symlink_to(copy)
    assert weights_fingerprint(copy) == weights_fingerprint(tmp_path / "link") == fingerprint
    tensors = load_file(copy / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] += 1
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    assert weights_fingerprint(copy) != fingerprint
    model = AutoModelForMaskedLM.from_pretrained(str(plain_base))
    model.save_pretrained(str(tmp_path / "sharded"), max_shard_size="40KB")
    sharded = weights_fingerprint(tmp_path / "sharded")
    assert sharded == weights_fingerprint(tmp_path / "sharded") and sharded != fingerprint
    assert weights_parameter_count(tmp_path / "sharded") == sum(p.numel() for p in model.parameters())
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    torch.save(load_file(plain_base / "model.safetensors"), pickled / "pytorch_model.bin")
    assert weights_fingerprint(pickled).startswith("sha256:")


def test_a_base_pickled_whole_is_one_line_naming_the_conversion_that_then_works(
    plain_base: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """pytorch_model.bin holding the whole model object (torch.save(model)): refused before it is unpickled, in one
    line that says it is a pickle mlmtrain does not unpickle and how to convert it (not "truncated or corrupt");
    converted so, it is read."""
    import torch
    from transformers import AutoModelForMaskedLM

    folder = Path(shutil.copytree(plain_base, tmp_path / "pickled"))
    torch.save(AutoModelForMaskedLM.from_pretrained(str(folder)), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    evaluate = ["eval-perplexity", "--model", str(folder), "--data", str(tiny_data / "valid.txt"), "--seq-len", "32"]
    for command in (evaluate, ["pretrain", *_set(continue_options(tiny_data, folder, tmp_path))]):
        code, lines = run_cli(capsys, *command)
        assert code == 2, lines
        line = assert_one_error_line(
            lines, f"the weights of {folder} are a pickle", "never unpickles", "save_pretrained"
        )
        assert "corrupt" not in line and "weights_only=False will likely succeed" not in line
    assert not (tmp_path / "run").exists()
    # the conversion the line names, done where the file is trusted (here: this test wrote it)
    torch.load(folder / "pytorch_model.bin", weights_only=False).save_pretrained(str(folder))
    code, lines = run_cli(capsys, *evaluate)
    assert code == 0, lines
