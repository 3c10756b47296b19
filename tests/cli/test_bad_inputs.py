"""Bad input through the real command line: odd or broken data files, a token store cut short by a crash,
and a table of bad configs and arguments. Each must give exit code 2 and one line naming the culprit, or
(for text that can be read) succeed and say what was skipped or replaced.
"""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlmtrain.data.store import TokenStore
from mlmtrain.errors import UserError

from ..helpers import (
    CHILD_ENV,
    CHILD_TIMEOUT_S,
    WORDS,
    assert_one_error_line,
    run_cli,
    set_options,
    store_files,
    write_corpus,
)

QUICK_RUN = {"train.max_steps": 2, "train.eval_every": 0, "checkpoint.save_every": 0}


def prepare(tmp_path: Path, train: str | None = None, **overrides: object) -> list[str]:
    """--set options for tokenize/pretrain on the text in tmp_path (train.txt and valid.txt unless overridden)."""
    if not (tmp_path / "valid.txt").exists():
        write_corpus(tmp_path / "valid.txt", 60, seed=2)
    if train is not None:
        overrides["data.train"] = train
    return set_options(tmp_path, tmp_path / "run", **{**QUICK_RUN, **overrides})


def meta(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "tokens" / "meta.json").read_text())


def tokenize_and_pretrain(capsys: pytest.CaptureFixture, options: list[str]) -> list[str]:
    """Both commands succeed; returns the stderr lines of tokenize."""
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 0, lines
    code, pretrain_lines = run_cli(capsys, "pretrain", *options)
    assert code == 0, pretrain_lines
    return lines


# ---------------------------------------------------------------------------------------------
# Text that can be read: succeed, and say what was skipped or replaced


def test_empty_and_whitespace_lines_are_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lines = write_corpus(tmp_path / "good.txt", 200, seed=1).read_text().splitlines()
    blanks = ["", "   ", "\t \t", "\u3000", " \r"] * 6  # 30 empty or whitespace-only lines, spread out
    for index, blank in enumerate(blanks):
        lines.insert(index * 7, blank)
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    said = tokenize_and_pretrain(capsys, prepare(tmp_path))
    assert meta(tmp_path)["splits"]["train"]["documents"] == 200
    assert any("30 empty or whitespace-only" in line for line in said), said


@pytest.mark.slow
def test_a_10_mb_single_line_is_one_long_document(
    tmp_path: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    rng = random.Random(3)
    huge = " ".join(rng.choice(WORDS) for _ in range(2_200_000))[: 10 * 1024 * 1024]
    write_corpus(tmp_path / "train.txt", 100, seed=1)
    with open(tmp_path / "train.txt", "a", encoding="utf-8") as handle:
        handle.write(huge + "\n")
    # the session's tokenizer: training a new one on 10 MB would only add time
    tokenize_and_pretrain(capsys, prepare(tmp_path, **{"tokenizer.pretrained": str(tiny_data / "tokenizer")}))
    train = meta(tmp_path)["splits"]["train"]
    assert train["documents"] == 101
    assert train["tokens"] > 1_500_000


def test_binary_junk_and_invalid_utf8_are_replaced_and_counted(
    tmp_path: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    write_corpus(tmp_path / "train.txt", 200, seed=1)
    with open(tmp_path / "train.txt", "ab") as handle:
        handle.write(b"caf\xe9 au lait\n\xff\xfe broken bytes here\nthe fox \xc3\x28 jumps\n")
    junk = random.Random(4).randbytes(64 * 1024).replace(b"\n", b"").replace(b"\r", b"")  # one line of binary junk
    (tmp_path / "junk.txt").write_bytes(junk + b"\n")
    sources = f"[{tmp_path / 'train.txt'}, {tmp_path / 'junk.txt'}]"
    # the session's tokenizer: one trained here would need room for the thousand odd characters of the junk
    said = tokenize_and_pretrain(
        capsys, prepare(tmp_path, sources, **{"tokenizer.pretrained": str(tiny_data / "tokenizer")})
    )
    assert meta(tmp_path)["splits"]["train"]["documents"] == 200 + 3 + 1
    assert any("4 lines had invalid UTF-8 bytes (replaced by U+FFFD)" in line for line in said), said


# ---------------------------------------------------------------------------------------------
# Text that cannot be used: exit 2, one line naming the file and the key


def _missing_json_field(tmp_path: Path) -> str:
    path = tmp_path / "train.jsonl"
    records = [{"text": "the quick brown fox"}, {"text": "jumps over"}, {"body": "no text here"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _malformed_json_line(tmp_path: Path) -> str:
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "not closed"\n')
    return str(path)


def _missing_csv_column(tmp_path: Path) -> str:
    path = tmp_path / "train.csv"
    path.write_text("title,body\nA fox,the quick brown fox\n")
    return str(path)


def _glob_matching_nothing(tmp_path: Path) -> str:
    return str(tmp_path / "shards" / "part-*.txt")


def _missing_file(tmp_path: Path) -> str:
    return str(tmp_path / "no-such-file.txt")


def _only_blank_lines(tmp_path: Path) -> str:
    path = tmp_path / "train.txt"
    path.write_text("\n   \n\t\n\n")
    return str(path)


def _corrupt_gzip(tmp_path: Path) -> str:
    path = tmp_path / "train.txt.gz"
    whole = gzip.compress(write_corpus(tmp_path / "text.txt", 200).read_bytes())
    path.write_bytes(whole[: len(whole) // 2])  # a download cut short
    return str(path)


def _unsupported_extension(tmp_path: Path) -> str:
    path = tmp_path / "train.pdf"
    path.write_bytes(b"%PDF-1.4")
    return str(path)


BAD_DATA = {
    "missing-json-field": (_missing_json_field, ["train.jsonl:3", "'text'", "data.text_field"]),
    "malformed-json-line": (_malformed_json_line, ["train.jsonl:2", "not valid JSON"]),
    "missing-csv-column": (_missing_csv_column, ["train.csv", "column 'text'", "data.text_field"]),
    "glob-matches-nothing": (_glob_matching_nothing, ["data.train", "part-*.txt", "no file matches"]),
    "missing-file": (_missing_file, ["data.train", "no-such-file.txt", "does not exist"]),
    "only-blank-lines": (_only_blank_lines, ["no documents", "data.train"]),
    "corrupt-gzip": (_corrupt_gzip, ["cannot read", "train.txt.gz"]),
    "unsupported-extension": (_unsupported_extension, ["data.train", "train.pdf", "unsupported extension"]),
}


@pytest.mark.parametrize("command", ["tokenize", "pretrain"])
@pytest.mark.parametrize("case", list(BAD_DATA))
def test_unusable_data_is_one_line_and_exit_2(
    case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    make, needles = BAD_DATA[case]
    code, lines = run_cli(capsys, command, *prepare(tmp_path, make(tmp_path)))
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: ", *needles)
    assert not (tmp_path / "tokens").exists()


# ---------------------------------------------------------------------------------------------
# A token store cut short by a crash


def _cut_shard(store: Path) -> str:
    shard = store_files(store)[0]
    with open(shard, "r+b") as handle:
        handle.truncate(shard.stat().st_size // 3)
    return shard.name


def _cut_document_index(store: Path) -> str:
    index = store_files(store)[1]
    index.write_bytes(index.read_bytes()[:100])
    return index.name


def _remove_marker(store: Path) -> str:
    (store / "COMPLETE").unlink()
    return "incomplete"


STORE_DAMAGE = {
    "cut-shard": _cut_shard,
    "cut-document-index": _cut_document_index,
    "no-complete-marker": _remove_marker,
}


# data.document_attention within where it cannot be: (settings, what the one line says)
WITHIN_REFUSED = {
    "unpacked": ({"data.packing": False}, "data.packing is false (one document per block already)"),
    "electra": ({"train.objective": "electra"}, "which train.objective mlm supports, not electra"),
    "sentence-pairs": ({"train.objective": "mlm+sop"}, "which train.objective mlm supports, not mlm+sop"),
}


@pytest.mark.parametrize("case", sorted(WITHIN_REFUSED))
def test_attention_within_documents_where_it_cannot_be_is_one_line_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    settings, needle = WITHIN_REFUSED[case]
    write_corpus(tmp_path / "train.txt", 50, seed=1)
    options = prepare(tmp_path, **{"data.document_attention": "within", **settings})
    code, lines = run_cli(capsys, "pretrain", *options)
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: config: data.document_attention", needle)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.txt", "valid.txt"]


@pytest.mark.parametrize("damage", list(STORE_DAMAGE))
def test_a_store_cut_short_is_detected_and_rebuilt(damage: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_corpus(tmp_path / "train.txt", 200, seed=1)
    options = prepare(tmp_path)
    assert run_cli(capsys, "tokenize", *options)[0] == 0
    store = tmp_path / "tokens"
    intact = np.fromfile(store_files(store)[0], dtype=np.uint16)
    problem = STORE_DAMAGE[damage](store)

    with pytest.raises(UserError, match=problem):  # the reader never serves a damaged store
        TokenStore(store, "train")
    # `pretrain` (which tokenizes first when the store is not usable) says so and rebuilds it, then trains
    code, lines = run_cli(capsys, "pretrain", *options)
    assert code == 0, lines
    assert any(line.startswith(f"token store {store}") and problem in line for line in lines), lines
    assert np.array_equal(np.asarray(TokenStore(store, "train").tokens(0, len(intact))), intact)


# ---------------------------------------------------------------------------------------------
# Bad configs and arguments


@pytest.fixture(scope="module")
def model_dir(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlmtrain.config import load_config
    from mlmtrain.train.loop import pretrain

    from ..helpers import tiny_overrides

    run_dir = tmp_path_factory.mktemp("model") / "run"
    return pretrain(load_config(None, tiny_overrides(tiny_data, **QUICK_RUN, **{"train.run_dir": str(run_dir)})))


CONFIG_FILES = {
    "malformed.yaml": "optim:\n  lr: 0.1\n   warmup_steps: 3\n",
    "list.yaml": "- data\n- model\n",
    "section-not-mapping.yaml": "model: 5\n",
    "unknown-section.yaml": "modle:\n  hidden_size: 64\n",
    "unknown-key.yaml": "optim:\n  learning_rate: 0.1\n",
    "tabs.yaml": "train:\n\tmax_steps: 3\n",
    "duplicate-section.yaml": "optim:\n  lr: 0.1\n  warmup_steps: 3\ntrain:\n  max_steps: 5\noptim:\n  eps: 1\n",
    "duplicate-key.yaml": "optim:\n  lr: 0.1\n  lr: 0.2\n",
    "a-file": "not a folder\n",
}

# (arguments, text the one line must hold); {tmp} is a scratch folder holding CONFIG_FILES, {model} a checkpoint,
# {valid} a text file. `config show` parses like every command and is the quickest to run.
BAD_ARGUMENTS = [
    (["config", "show", "--set", "optim.lrr=1"], "did you mean 'optim.lr'"),
    (["config", "show", "--set", "optimizer.lr=1"], "unknown section 'optimizer'"),
    (["config", "show", "--set", "train.batch_size=abc"], "train.batch_size must be int"),
    (["config", "show", "--set", "train.batch_size=1.5"], "train.batch_size must be int"),
    (["config", "show", "--set", "train.batch_size=true"], "train.batch_size must be int"),
    (["config", "show", "--set", "train.progress=maybe"], "train.progress must be bool"),
    (["config", "show", "--set", "train.compile=sometimes"], "train.compile must be bool or 'auto'"),
    (["config", "show", "--set", "masking.mlm_probability=abc"], "masking.mlm_probability must be float"),
    (["config", "show", "--set", "optim.lr=-1"], "optim.lr must be > 0"),
    (["config", "show", "--set", "optim.schedule=exponential"], "optim.schedule must be"),
    (["config", "show", "--set", "masking.mlm_probability=1.5"], "masking.mlm_probability must be in (0, 1)"),
    (["config", "show", "--set", "masking.random_replace=0.3"], "masking.mask_replace"),
    (["config", "show", "--set", "model.hidden_size=30", "--set", "model.num_heads=4"], "model.num_heads"),
    (["config", "show", "--set", "model.num_heads=0"], "model.num_heads must be >= 1"),
    (["config", "show", "--set", "model.hidden_dropout=1"], "model.hidden_dropout must be in [0, 1)"),
    (["config", "show", "--set", "data.seq_len=4"], "data.seq_len must be >= 8"),
    (["config", "show", "--set", "data.seq_len=1024"], "model.max_position_embeddings"),
    (["config", "show", "--set", "data.txt_documents=page"], "data.txt_documents must be"),
    (["config", "show", "--set", "data.train=[]"], "data.train"),
    (["config", "show", "--set", "tokenizer.vocab_size=8"], "tokenizer.vocab_size must be >= 16"),
    (["config", "show", "--set", "train.max_steps=null"], "train.max_steps"),
    (["config", "show", "--set", "train.max_time=soon"], "train.max_time"),
    (["config", "show", "--set", "train.pause_after=0"], "train.pause_after must be >= 1"),
    (["config", "show", "--set", "train.max_nonfinite=0"], "train.max_nonfinite"),
    (["config", "show", "--set", "checkpoint.keep_last=-1"], "checkpoint.keep_last"),
    (["config", "show", "--set", "train.device=tpu"], "train.device must be auto, cpu, cuda or cuda:N"),
    (["config", "show", "--set", "train.micro_batch_size=3"], "train.micro_batch_size"),
    (["config", "show", "--set", "optim.lr"], "--set 'optim.lr' must look like section.key=value"),
    (["config", "show", "--set", "lr=1"], "must name section.key"),
    (["config", "show", "--set", "data.train.path=x"], "must name section.key"),
    (["config", "show", "--set", "=1"], "must name section.key"),
    (["config", "show", "--config", "{tmp}/missing.yaml"], "missing.yaml does not exist"),
    (["config", "show", "--config", "{tmp}/malformed.yaml"], "malformed.yaml: malformed YAML at line 3"),
    (["config", "show", "--config", "{tmp}/tabs.yaml"], "tabs.yaml: malformed YAML at line 2"),
    (["config", "show", "--config", "{tmp}/list.yaml"], "must hold a mapping of sections"),
    (["config", "show", "--config", "{tmp}/section-not-mapping.yaml"], "section 'model' must be a mapping"),
    (["config", "show", "--config", "{tmp}/unknown-section.yaml"], "did you mean 'model'"),
    (["config", "show", "--config", "{tmp}/unknown-key.yaml"], "unknown key 'optim.learning_rate'"),
    (["config", "show", "--config", "{tmp}/duplicate-section.yaml"], "'optim' appears twice (lines 1 and 6)"),
    (["config", "show", "--config", "{tmp}/duplicate-key.yaml"], "'optim.lr' appears twice (lines 2 and 3)"),
    (["tokenize", "--set", "tokenizer.min_frequency=0"], "tokenizer.min_frequency must be >= 1"),
    (["config", "show", "--set", "train.seed=99999999999999999999"], "train.seed is out of range"),
    (["config", "show", "--set", "tokenizer.min_frequency=99999999999999999999"], "min_frequency is out of range"),
    (
        ["eval-perplexity", "--model", "{model}", "--data", "{valid}", "--max-blocks", "99999999999999999999"],
        "--max-blocks is out of range",
    ),
    (["tokenize", "--lr", "1"], "No such option: --lr"),
    (["pretrain", "--bogus"], "No such option: --bogus"),
    (["pretrain", "--set", "train.seed=1", "train.batch_size=8"], "give --set before each KEY=VALUE"),
    (["pretrain", "--config"], "'--config' requires an argument"),
    (["pretrain", "--set", "data.seq_len=128", "--set", "model.max_position_embeddings=64"], "data.seq_len"),
    (["pretrain", "--set", "train.run_dir={tmp}/run", "--set", "train.device=cuda:99"], "train.device"),
    (["pretrain", "--set", "train.run_dir={tmp}/run", "--resume", "{tmp}/no-such-checkpoint"], "--resume"),
    (["pretrain", "--set", "train.run_dir={tmp}/run", "--resume", "--overwrite"], "--overwrite"),
    (["pretrain", "--set", "train.run_dir={tmp}/run", "--resume", ""], "--resume ''"),
    (["pretrain", "--set", "train.run_dir={tmp}/run", "--resume", " "], "--resume ' '"),
    (["pretrain", "--set", "train.run_dir={tmp}/a-file"], "a-file is a file; set train.run_dir to a folder"),
    (["pretrain", "--set", "train.run_dir={tmp}/a-file/run"], "a-file/run lies under"),
    (["pretrain", "--set", "train.run_dir=/proc/mlmtrain-run"], "cannot write in train.run_dir /proc/mlmtrain-run"),
    (["pretrain", "--set", "train.run_dir={tmp}/run", "--set", "model.hidden_size=65536"], "parameters"),
    (["fill-mask", "--model", "{model}", "-k", "100000", "a [MASK] b"], "--top-k"),
    (["fill-mask", "--model", "{model}", "a [MASK] " + "word " * 100], "positions"),
    (["fill-mask", "--model", "{model}", "a quick [MASK] fox \udcff\udcfe here"], "not valid UTF-8"),
    (["pretrian"], "No such command 'pretrian'"),
    (["eval-perplexity", "--model", "{model}"], "--data"),
    (["eval-perplexity", "--model", "{tmp}/no-model", "--data", "{valid}"], "--model"),
    (["eval-perplexity", "--model", "{model}", "--data", "{tmp}/no-such.txt"], "--data"),
    (["eval-perplexity", "--model", "{model}", "--data", "{valid}", "--batch-size", "0"], "--batch-size"),
    (["eval-perplexity", "--model", "{model}", "--data", "{valid}", "--max-tokens", "9"], "--max-tokens"),
    (["eval-perplexity", "--model", "{model}", "--data", "{valid}", "--seq-len", "4"], "--seq-len"),
    (["eval-perplexity", "--model", "{model}", "--data", "{valid}", "--seq-len", "4096"], "--seq-len"),
    (["eval-perplexity", "--model", "{model}", "--data", "{valid}", "--device", "tpu"], "--device"),
    (["eval-perplexity", "--model", "{model}", "--data", "{valid}", "--batch-size", "many"], "--batch-size"),
]


def _fill(args: list[str], tmp: Path, model: Path, valid: Path) -> list[str]:
    return [arg.format(tmp=tmp, model=model, valid=valid) for arg in args]


@pytest.fixture
def config_files(tmp_path: Path) -> Path:
    for name, text in CONFIG_FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("args,needle", BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_bad_config_or_argument_is_one_line_and_exit_2(
    args: list[str],
    needle: str,
    config_files: Path,
    model_dir: Path,
    tiny_data: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(config_files)  # a command that wrongly used its defaults would write here, not in the repo
    code, lines = run_cli(capsys, *_fill(args, config_files, model_dir, tiny_data / "valid.txt"))
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert_one_error_line(lines, "mlmtrain: ", needle)


# a few rows again through a real process: the entry point, exit status and stderr as a shell sees them
IN_A_PROCESS = {
    "config show --set optim.lrr=1",
    "config show --config {tmp}/malformed.yaml",
    "pretrain --bogus",
    "pretrain --set data.seq_len=128 --set model.max_position_embeddings=64",
}
SUBPROCESS_ROWS = [row for row in BAD_ARGUMENTS if " ".join(row[0]) in IN_A_PROCESS]


@pytest.mark.parametrize("args,needle", SUBPROCESS_ROWS, ids=[" ".join(a) for a, _ in SUBPROCESS_ROWS])
def test_bad_config_or_argument_in_a_real_process(
    args: list[str], needle: str, config_files: Path, model_dir: Path, tiny_data: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mlmtrain", *_fill(args, config_files, model_dir, tiny_data / "valid.txt")],
        capture_output=True,
        text=True,
        cwd=config_files,
        env=CHILD_ENV,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert_one_error_line(done.stderr.strip().splitlines(), "mlmtrain: ", needle)


@pytest.mark.parametrize("errors", ["surrogateescape", "strict"])
def test_fill_mask_refuses_a_stdin_line_that_is_not_utf8(model_dir: Path, errors: str) -> None:
    """Python reads undecodable stdin bytes as lone surrogates (or fails a whole chunk, under a strict locale),
    which the tokenizer cannot take: one line, naming the line, after the good lines' completions."""
    done = subprocess.run(
        [sys.executable, "-m", "mlmtrain", "fill-mask", "--model", str(model_dir), "--device", "cpu", "-k", "1"],
        input=b"the quick [MASK] fox\n\na quick [MASK] fox \xff\xfe here\n",
        capture_output=True,
        env={**CHILD_ENV, "PYTHONIOENCODING": f"utf-8:{errors}"},
        timeout=120,
    )
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, stderr
    assert_one_error_line(stderr.strip().splitlines(), "fill-mask", "line 3 of stdin", "not valid UTF-8")
    assert done.stdout.decode().startswith("the quick [MASK] fox\n")


# ---------------------------------------------------------------------------------------------
# train.compile on a machine that cannot compile: torch.compile's CPU backend writes and builds C++


def _pretrain_compiled(tiny_data: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    options = set_options(tiny_data, tmp_path / "run", **{**QUICK_RUN, "train.compile": "true"})
    return subprocess.run(
        [sys.executable, "-m", "mlmtrain", "pretrain", *options],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**CHILD_ENV, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"), **env},
        timeout=CHILD_TIMEOUT_S,
    )


def test_compile_without_a_cpp_compiler_is_one_line_before_anything_is_built(tiny_data: Path, tmp_path: Path) -> None:
    """Before: the first step died in inductor with a 130-line traceback and exit 1."""
    done = _pretrain_compiled(tiny_data, tmp_path, CXX=str(tmp_path / "no-such-g++"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert_one_error_line(lines, "mlmtrain: config: ", "needs a C++ compiler", "train.compile: false")
    assert not any(line.startswith("pretrain:") for line in lines), lines  # refused before the model was built


def test_a_compiler_that_cannot_build_is_one_line_naming_its_error(tiny_data: Path, tmp_path: Path) -> None:
    """A compiler that answers --version but cannot build (here: no Python headers) passes the check before the
    start; the first step's compilation fails, and the user reads the compiler's error and the fix in one line."""
    fake = tmp_path / "g++"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "g++ 12"; exit 0; fi\n'
        'echo "fatal error: Python.h: No such file or directory" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    done = _pretrain_compiled(tiny_data, tmp_path, CXX=str(fake))
    assert done.returncode == 2, done.stderr
    assert_one_error_line(
        done.stderr.strip().splitlines(),
        "mlmtrain: compile: torch.compile could not compile the model",
        "Python.h: No such file or directory",
        "set train.compile: false",
    )
