"""Data in object storage, against a real S3 endpoint on 127.0.0.1 (moto's server, read through s3fs): a corpus
tokenized from S3 into an S3 store, pretrain reading that store through another machine's cache and resuming, the
cache's eviction, and the bad inputs (an unreachable endpoint, no credentials, a missing bucket or key, a URL with a
password, a remote folder that is not mlmtrain's, a cache too small): one line each, nothing written.

The `[remote]` extra's tests: skipped where s3fs or moto is missing, run by CI's extras job (where a skip fails)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mlmtrain.data.remote import Cache
from mlmtrain.data.store import TokenStore

from ..helpers import QUICK, assert_one_error_line, free_port, metrics, run_cli, set_options
from .test_scale import generated_corpus

s3fs = pytest.importorskip("s3fs")
pytest.importorskip("moto")
pytestmark = pytest.mark.extras  # the extra alone installs what it needs


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, for this module's tests."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "moto's server did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=30)


def _aws(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_MAX_ATTEMPTS": "1",  # a refused connection is said at once, not after retries
        "AWS_EC2_METADATA_DISABLED": "true",  # no credentials: no minute-long look-up of a cloud machine's
    }.items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # a filesystem made under another environment is not reused


@pytest.fixture
def bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A new bucket of the test's own: its s3:// URL."""
    _aws(monkeypatch, endpoint)
    name = f"mlmtrain-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem().mkdir(name)
    yield f"s3://{name}"
    s3fs.S3FileSystem.clear_instance_cache()


def _upload(local: Path, url: str) -> str:
    s3fs.S3FileSystem().put_file(str(local), url)
    return url


def _remote_options(tiny_data: Path, tmp_path: Path, bucket: str, cache: str, **extra: object) -> list[str]:
    return set_options(tiny_data, tmp_path / "run", **{
        "data.train": f"{bucket}/corpus/train.txt", "data.validation": f"{bucket}/corpus/valid.txt",
        "data.store": f"{bucket}/store", "tokenizer.path": f"{bucket}/tokenizer",
        "data.cache_dir": str(tmp_path / cache), **extra,
    })  # fmt: skip


def test_tokenize_from_s3_into_s3_then_pretrain_through_another_cache_and_resume(
    tiny_data: Path, tmp_path: Path, bucket: str, capsys: pytest.CaptureFixture
) -> None:
    generated_corpus(tmp_path / "train.txt", 600)
    generated_corpus(tmp_path / "valid.txt", 80, seed=1)
    _upload(tmp_path / "train.txt", f"{bucket}/corpus/train.txt")
    _upload(tmp_path / "valid.txt", f"{bucket}/corpus/valid.txt")
    code, lines = run_cli(capsys, "tokenize", *_remote_options(tiny_data, tmp_path, bucket, "cache-a"))
    assert code == 0, lines
    remote = {name.rsplit("/", 1)[-1] for name in s3fs.S3FileSystem().ls(f"{bucket}/store")}
    assert {"COMPLETE", "meta.json", "mlmtrain.yaml"} < remote and any(n.endswith("-00000.bin") for n in remote)
    assert "tokenizer.json" in {name.rsplit("/", 1)[-1] for name in s3fs.S3FileSystem().ls(f"{bucket}/tokenizer")}

    # the same text tokenized from local files gives the same tokens
    local = set_options(tmp_path, tmp_path / "local-run", **{
        "tokenizer.pretrained": str(next((tmp_path / "cache-a" / "copies").glob("tokenizer-*"))),
        "tokenizer.path": str(tmp_path / "local-tok"), "data.store": str(tmp_path / "local-store"),
    })  # fmt: skip
    assert run_cli(capsys, "tokenize", *local)[0] == 0
    local_tokens = TokenStore(tmp_path / "local-store", "train")
    remote_copy = next(path for path in (tmp_path / "cache-a" / "copies").glob("store-*"))
    from_s3 = TokenStore(remote_copy, "train")
    assert np.array_equal(from_s3.tokens(0, from_s3.num_tokens), local_tokens.tokens(0, local_tokens.num_tokens))

    # another machine: an empty cache of its own, the store and the tokenizer read from S3
    options = _remote_options(tiny_data, tmp_path, bucket, "cache-b", **QUICK)
    code, lines = run_cli(capsys, "pretrain", *options)
    assert code == 0, lines
    assert any(line.startswith("data.store: fetching s3://") for line in lines), lines
    assert (tmp_path / "cache-b" / "copies" / remote_copy.name / "COMPLETE").exists()
    code, lines = run_cli(capsys, "pretrain", *options, "--set", "train.max_steps=6", "--resume")
    assert code == 0, lines
    assert not any("fetching" in line for line in lines)  # read from the cache
    assert [m["step"] for m in metrics(tmp_path / "run") if "loss" in m][-1] == 6


def test_the_cache_evicts_the_least_recently_used_copy_not_needed_now(bucket: str, tmp_path: Path) -> None:
    urls = []
    for number in range(3):
        (tmp_path / f"f{number}").write_bytes(bytes([number]) * 400)
        urls.append(_upload(tmp_path / f"f{number}", f"{bucket}/shards/f{number}.mds"))
    cache = Cache(tmp_path / "cache", max_bytes=1000)
    first = cache.fetch_file(urls[0], 400, set())
    second = cache.fetch_file(urls[1], 400, set())
    time.sleep(0.01)
    assert cache.fetch_file(urls[0], 400, set()) == first  # already whole: used again, not fetched
    third = cache.fetch_file(urls[2], 400, {first})
    assert first.exists() and third.read_bytes() == bytes([2]) * 400
    assert not second.exists()  # the least recently used of those not needed went
    with pytest.raises(Exception, match="raise data.cache_max_gb"):
        cache.fetch_file(urls[1], 4000, set())


BAD_REMOTE = {
    # case: (what the config says, what the environment does, the line's words)
    "unreachable endpoint": ({}, {"AWS_ENDPOINT_URL": "http://127.0.0.1:{port}"}, "cannot reach the endpoint"),
    "no credentials": ({}, {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}, "no credentials for"),
    "no such bucket": ({"data.train": "s3://no-such-bucket-mlmtrain/train.txt"}, {}, "does not exist"),
    "no such key": ({"data.train": "{bucket}/corpus/missing.txt"}, {}, "does not exist"),
    "a password in the URL": ({"data.train": "s3://AKIAUSER:sup3rsecret@no-such-bucket-mlmtrain/x.txt"}, {}, "***"),
}


@pytest.mark.parametrize("case", sorted(BAD_REMOTE))
def test_a_bad_remote_is_one_line_that_shows_no_secret_and_writes_nothing(
    case: str, tiny_data: Path, tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    settings, environment, words = BAD_REMOTE[case]
    for name, value in environment.items():
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value.format(port=free_port()))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))  # no credentials of this machine's
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    s3fs.S3FileSystem.clear_instance_cache()
    options = _remote_options(tiny_data, tmp_path, bucket, "cache", **{
        "data.train": str(tiny_data / "train.txt"), "data.validation": str(tiny_data / "valid.txt"),
        **{key: value.format(bucket=bucket) for key, value in settings.items()},
    })  # fmt: skip
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 2
    line = assert_one_error_line(lines, "mlmtrain: data: ", words)
    assert "sup3rsecret" not in "\n".join(lines) and "testing" not in line
    assert not list((tmp_path / "cache").rglob("*.json"))  # no tokenizer, no store
    assert sorted(path.name for path in tmp_path.iterdir()) in (["run"], ["cache", "run"])


def test_a_remote_store_location_holding_other_files_is_refused_before_any_work(
    tiny_data: Path, tmp_path: Path, bucket: str, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "mine.csv").write_text("a,b\n")
    _upload(tmp_path / "mine.csv", f"{bucket}/store/mine.csv")
    options = _remote_options(tiny_data, tmp_path, bucket, "cache", **{
        "data.train": str(tiny_data / "train.txt"), "data.validation": str(tiny_data / "valid.txt"),
        "tokenizer.path": str(tmp_path / "tok"),
    })  # fmt: skip
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 2
    assert_one_error_line(lines, "data.store s3://", "mine.csv", "set data.store to a new location")
    assert not (tmp_path / "tok").exists()  # refused before the tokenizer was trained
    assert s3fs.S3FileSystem().cat_file(f"{bucket}/store/mine.csv") == b"a,b\n"


def test_a_remote_store_larger_than_the_cache_is_one_line(
    tiny_data: Path, tmp_path: Path, bucket: str, capsys: pytest.CaptureFixture
) -> None:
    options = _remote_options(tiny_data, tmp_path, bucket, "cache", **{
        "data.train": str(tiny_data / "train.txt"), "data.validation": str(tiny_data / "valid.txt"), **QUICK,
    })  # fmt: skip
    assert run_cli(capsys, "tokenize", *options)[0] == 0
    small = _remote_options(tiny_data, tmp_path, bucket, "other-cache", **{
        "data.train": str(tiny_data / "train.txt"), "data.validation": str(tiny_data / "valid.txt"), **QUICK,
        "data.cache_max_gb": 1e-6,
    })  # fmt: skip
    code, lines = run_cli(capsys, "pretrain", *small)
    assert code == 2
    assert_one_error_line(lines, "does not fit in the cache's data.cache_max_gb", "raise data.cache_max_gb")
