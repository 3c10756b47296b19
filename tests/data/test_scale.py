"""Tokenizing at scale: worker processes that write the same store whatever their count, a source's tokens as a unit
a later build reuses, memory that does not grow with the corpus, a kill -9 that leaves no half store, the bounded
sample a tokenizer trains on, and the bad values of data.tokenize_workers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from mlmtrain.config import load_config
from mlmtrain.data import encoding, store
from mlmtrain.data.encoding import available_cores
from mlmtrain.data.sources import Corpus
from mlmtrain.data.store import COMPLETE, TokenStore, count_duplicates, tokenize_corpus

from ..helpers import CHILD_ENV, CHILD_TIMEOUT_S, WORDS, assert_one_error_line, run_cli, set_options, tiny_overrides


def generated_corpus(path: Path, documents: int, seed: int = 0) -> Path:
    """`documents` distinct lines of English-like words, written fast: a few hundred lines drawn once, each repeat
    numbered so that no two documents are the same text."""
    rng = np.random.default_rng(seed)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(5, 60))) for _ in range(500)]
    with open(path, "w", encoding="utf-8") as handle:
        for number in range(documents):
            handle.write(f"{lines[number % len(lines)]} {number}.\n")
    return path


def data_files(folder: Path) -> dict[str, bytes]:
    """Every file of a store but its config record (which names its own folder and worker count)."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.name != "mlmtrain.yaml"}


def undated(meta: bytes) -> dict:
    """A store's meta.json without the time it was built."""
    return {key: value for key, value in json.loads(meta).items() if key != "created"}


def store_options(root: Path, tiny_data: Path, name: str, **extra: object) -> list[str]:
    """A store of its own under `root` from root's corpus, with the tiny data's tokenizer copied (none trained)."""
    return tiny_overrides(
        root,
        **{
            "tokenizer.pretrained": str(tiny_data / "tokenizer"),
            "tokenizer.path": str(root / f"tokenizer-{name}"),
            "data.store": str(root / f"store-{name}"),
            "train.run_dir": str(root / f"run-{name}"),
            **extra,
        },
    )


def test_the_store_is_the_same_byte_for_byte_whatever_the_worker_count(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # small chunks and no in-process start: the workers encode nearly everything, in many chunks; "local": all of
    # it in this process (a call per document, where a worker makes one call per chunk)
    monkeypatch.setattr(encoding, "CHUNK_DOCUMENTS", 40)
    generated_corpus(tmp_path / "train.txt", 3000)
    generated_corpus(tmp_path / "valid.txt", 300, seed=1)
    built = {}
    for name, workers, pool_after in (("local", 1, 1 << 40), ("1", 1, 0), ("2", 2, 0)):
        monkeypatch.setattr(encoding, "POOL_AFTER_BYTES", pool_after)
        cfg = load_config(None, store_options(tmp_path, tiny_data, name, **{"data.tokenize_workers": workers}))
        built[name] = data_files(tokenize_corpus(cfg, quiet=True))
    metas = {name: undated(files.pop("meta.json")) for name, files in built.items()}
    assert built["local"] == built["1"] == built["2"]  # every unit's shards, document index and record
    assert metas["local"] == metas["1"] == metas["2"]
    store_2 = TokenStore(tmp_path / "store-2", "train")
    assert store_2.num_documents == 3000 and len(store_2.sources) == 1


def test_the_summary_counts_a_training_source_that_is_also_the_validation_source(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = generated_corpus(tmp_path / "train.txt", 400)
    cfg = load_config(None, store_options(tmp_path, tiny_data, "same", **{"data.validation": str(path)}))
    capsys.readouterr()
    folder = tokenize_corpus(cfg)
    summary = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tokenize: ")]
    assert len(summary) == 1 and summary[0].startswith("tokenize: 400 train / 400 validation documents, "), summary
    assert TokenStore(folder, "train").num_documents == TokenStore(folder, "validation").num_documents == 400


def test_a_source_already_encoded_is_linked_into_the_next_store_not_encoded_again(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    generated_corpus(tmp_path / "train.txt", 400)
    generated_corpus(tmp_path / "valid.txt", 50, seed=1)
    cfg = load_config(None, store_options(tmp_path, tiny_data, "a"))
    folder = tokenize_corpus(cfg, quiet=True)
    train_unit = TokenStore(folder, "train").sources[0]
    shard = folder / train_unit.record["shards"][0]["file"]
    inode = shard.stat().st_ino
    generated_corpus(tmp_path / "valid.txt", 60, seed=2)  # another validation source; the same training text
    capsys.readouterr()
    tokenize_corpus(cfg, quiet=True)
    said = capsys.readouterr().err.splitlines()
    assert [line for line in said if line.endswith(f"is already encoded in {folder}; kept")] == [
        f"train: {Corpus(str(tmp_path / 'train.txt')).describe()} is already encoded in {folder}; kept"
    ]
    assert shard.stat().st_ino == inode  # the same file, linked into the new store
    assert TokenStore(folder, "validation").num_documents == 60
    assert sorted(path.name for path in folder.glob("src-*.json")) == sorted(
        f"{unit}.json" for unit in {train_unit.unit, TokenStore(folder, "validation").sources[0].unit}
    )  # the old validation source's files went with the old store


def test_digests_counted_a_bucket_at_a_time_find_every_exact_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digests = np.random.default_rng(0).integers(0, 2**63, size=5000, dtype=np.uint64)
    digests[::7] = digests[1::7][: len(digests[::7])]  # 715 repeats of another document
    path = tmp_path / "hashes"
    digests.tofile(path)
    expected = len(digests) - len(np.unique(digests))
    monkeypatch.setattr(store, "DUPLICATE_BUCKET", 300)  # 17 buckets
    assert count_duplicates(path, len(digests)) == expected > 700


def test_a_tokenizer_trains_on_each_files_share_of_the_sample(tmp_path: Path) -> None:
    big = generated_corpus(tmp_path / "big.txt", 3000)
    small = generated_corpus(tmp_path / "small.txt", 1000, seed=1)
    total = big.stat().st_size + small.stat().st_size
    corpus = Corpus([str(big), str(small)])
    sample = list(corpus.sample(total // 4))
    taken = {name: [text for text in sample if text in set(path.read_text().splitlines())] for name, path in
             (("big", big), ("small", small))}  # fmt: skip
    for name, path in (("big", big), ("small", small)):
        lines = path.read_text().splitlines()
        assert taken[name] == lines[: len(taken[name])]  # from the file's start
        share = len("".join(taken[name]).encode()) / path.stat().st_size
        assert 0.2 < share < 0.3, (name, share)  # its share of the budget: a quarter of the file
    assert list(corpus.sample(total * 2)) == list(corpus)  # a corpus within the budget: all of it


@pytest.mark.parametrize("workers", ["0", "huge"])
def test_tokenize_workers_below_one_or_above_the_cores_is_one_line_and_writes_nothing(
    workers: str, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    count = 0 if workers == "0" else available_cores() + 1
    options = set_options(tiny_data, tmp_path / "run", **{
        "data.tokenize_workers": count, "tokenizer.path": str(tmp_path / "tok"), "data.store": str(tmp_path / "st"),
    })  # fmt: skip
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 2
    needle = "data.tokenize_workers must be >= 1" if count == 0 else f"above the {available_cores()} cores"
    assert_one_error_line(lines, "mlmtrain: config: data.tokenize_workers", needle)
    assert not (tmp_path / "tok").exists() and not (tmp_path / "st").exists()
    fixed = set_options(tiny_data, tmp_path / "run", **{
        "data.tokenize_workers": available_cores(), "tokenizer.path": str(tmp_path / "tok"),
        "data.store": str(tmp_path / "st"),
    })  # fmt: skip
    assert run_cli(capsys, "tokenize", *fixed)[0] == 0  # the fix the line names works


class RecordingBar:
    """What the progress bar is told."""

    def __init__(self) -> None:
        self.n, self.postfix = 0, {}

    def update(self, n: int) -> None:
        self.n += n

    def set_postfix(self, **figures: str) -> None:
        self.postfix = figures


def test_progress_counts_megabytes_read_with_their_speed_and_the_tokens_per_second(tmp_path: Path) -> None:
    path = generated_corpus(tmp_path / "train.txt", 20000)
    corpus = Corpus(str(path))
    assert corpus.input_size() == path.stat().st_size  # the bar's total: the time left follows from it
    spec = encoding.EncoderSpec(_tokenizer_json(), sep_id=3, unk_id=1, dtype="uint16")  # a tokenizer of its own
    writer = store.UnitWriter(tmp_path, "src-0123456789abcdef", np.dtype(np.uint16))
    bar = RecordingBar()
    progress = store._SplitProgress(writer, corpus, bar, "train")
    for _, chunk in encoding.encode_in_order(((0, texts) for texts in encoding.chunked(corpus)), spec, 1):
        progress.write(chunk)
    assert bar.n == path.stat().st_size // 1_000_000 > 0
    assert set(bar.postfix) == {"tokens", "MB_s", "tok_s"}
    assert bar.postfix["tokens"] == f"{writer.stats.tokens:,}"


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({w: i + 5 for i, w in enumerate(WORDS)} | {"[UNK]": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str()


# ---------------------------------------------------------------------------------------------
# Processes: memory and a kill


def _tokenize_command(root: Path, tiny_data: Path, name: str, workers: int) -> list[str]:
    options = store_options(root, tiny_data, name, **{"data.tokenize_workers": workers})
    return [sys.executable, "-m", "mlmtrain", "tokenize", *(arg for pair in options for arg in ("--set", pair))]


def _peak_rss_mb(command: list[str]) -> float:
    """The largest resident size (MB) of `command`'s process over its life, as the kernel counted it."""
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    done = subprocess.run([sys.executable, "-c", probe, *command], env=CHILD_ENV, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1]) / 1024


@pytest.mark.slow
def test_memory_does_not_grow_with_the_corpus(tiny_data: Path, tmp_path: Path) -> None:
    peaks = {}
    for documents in (4000, 60000):  # about 0.6 and 9 MB of text, 0.15 and 2.3 M tokens
        root = tmp_path / str(documents)
        root.mkdir()
        generated_corpus(root / "train.txt", documents)
        generated_corpus(root / "valid.txt", 200, seed=1)
        peaks[documents] = _peak_rss_mb(_tokenize_command(root, tiny_data, "m", 2))
    # of the main process, which reads, gathers and writes (the workers hold a chunk each): holding the corpus would
    # take 8.5 MB more as text and 17 MB more as int64 ids (as Python lists, ~100 MB)
    assert peaks[60000] - peaks[4000] < 8, peaks
    assert peaks[60000] < 600, peaks  # docs/data.md: about 0.4 GB for the main process


@pytest.mark.slow
def test_a_kill_during_tokenizing_leaves_the_old_store_whole_and_nothing_half_built(
    tiny_data: Path, tmp_path: Path
) -> None:
    generated_corpus(tmp_path / "train.txt", 2000)
    generated_corpus(tmp_path / "valid.txt", 100, seed=1)
    old = tokenize_corpus(load_config(None, store_options(tmp_path, tiny_data, "k")), quiet=True)
    old_files = data_files(old)
    (tmp_path / "notes.md").write_text("mine")
    generated_corpus(tmp_path / "train.txt", 150000)  # a new corpus: a few seconds of encoding on two workers
    corpus_bytes = (tmp_path / "train.txt").read_bytes()
    job = subprocess.Popen(_tokenize_command(tmp_path, tiny_data, "k", 2), env=CHILD_ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    workers: list[psutil.Process] = []
    while time.monotonic() < deadline and job.poll() is None:
        staging = [p for p in tmp_path.glob(".store-k.tmp-*") if any(s.stat().st_size for s in p.glob("*.bin"))]
        workers = psutil.Process(job.pid).children(recursive=True)
        if staging and len(workers) >= 2:  # encoding under way in the worker processes
            break
        time.sleep(0.05)
    assert job.poll() is None, job.stderr.read().decode()[-2000:]
    job.send_signal(signal.SIGKILL)
    job.wait()
    job.stderr.close()
    gone, alive = psutil.wait_procs(workers, timeout=10)  # the workers notice their parent is gone and stop
    assert not alive
    assert data_files(old) == old_files and (old / COMPLETE).exists()  # the previous store, as it was
    assert (tmp_path / "notes.md").read_text() == "mine" and (tmp_path / "train.txt").read_bytes() == corpus_bytes
    with pytest.raises(Exception, match="incomplete|no token store"):
        TokenStore(next(tmp_path.glob(".store-k.tmp-*")), "train")  # the half-built one is never read
    generated_corpus(tmp_path / "train.txt", 3000)  # a later run, on a corpus of its own
    rebuilt = tokenize_corpus(load_config(None, store_options(tmp_path, tiny_data, "k")), quiet=True)
    assert TokenStore(rebuilt, "train").num_documents == 3000
    assert not list(tmp_path.glob(".store-k.tmp-*"))  # the killed process's leftover is cleared
