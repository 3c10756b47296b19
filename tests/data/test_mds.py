"""MosaicML Streaming (MDS) datasets as data.train: shards written by the `streaming` library itself, plain and
compressed, read back as the same documents, tokenized into the store, read from S3 through the cache; a pickled
column beside the text is never unpickled; a folder without index.json or a column that is not text is one line.

The `[mds]` extra's tests: skipped where streaming is missing, run by CI's extras job (where a skip fails)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from mlmtrain.data.remote import Cache
from mlmtrain.data.sources import Corpus
from mlmtrain.data.store import TokenStore

from ..helpers import assert_one_error_line, run_cli, set_options
from .test_remote import bucket, endpoint  # noqa: F401 (fixtures: a bucket on the local S3 endpoint)

pytestmark = pytest.mark.extras  # the extra alone installs what it needs


class Unreadable:
    """A value for a pickled column: its class is gone by the time the dataset is read, so unpickling it fails."""


@pytest.fixture
def writer(monkeypatch: pytest.MonkeyPatch) -> type:
    """streaming's MDSWriter. Its package imports its vision datasets, hence torchvision, on import, and a torchvision
    built for another torch (a CPU torch from another index) breaks transformers: CI's extras job installs streaming
    without it, and an empty module stands in for that part, which writing text shards never touches."""
    pytest.importorskip("zstd")
    try:
        import torchvision  # noqa: F401
    except Exception:
        monkeypatch.setitem(sys.modules, "streaming.vision", types.ModuleType("streaming.vision"))
    streaming = pytest.importorskip("streaming")
    return streaming.MDSWriter


DOCUMENTS = [f"Document {number}: {'several words of text ' * (number % 7 + 1)}é." for number in range(300)]


def write_dataset(writer: type, folder: Path, compression: str | None, **columns: str) -> Path:
    with writer(out=str(folder), columns={"text": "str", "id": "int", **columns}, compression=compression,
                size_limit=4096) as out:  # fmt: skip
        for number, text in enumerate(DOCUMENTS):
            sample = {"text": text, "id": number}
            if "obj" in columns:
                sample["obj"] = Unreadable()
            out.write(sample)
    return folder


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_an_mds_dataset_written_by_streaming_reads_back_as_the_same_documents(
    writer: type, tmp_path: Path, compression: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_dataset(writer, tmp_path / "ds", compression, obj="pkl")
    assert len(list(folder.glob("shard.*"))) > 3  # several shards
    monkeypatch.delattr(sys.modules[__name__], "Unreadable")  # unpickling the column beside the text would fail now
    corpus = Corpus(f"mds:{folder}")
    assert list(corpus) == DOCUMENTS
    assert corpus.stats.input_bytes == corpus.input_size() > 0  # progress reaches the dataset's size


def test_an_mds_dataset_is_tokenized_into_the_store(
    writer: type, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = write_dataset(writer, tmp_path / "ds", None)
    options = set_options(tiny_data, tmp_path / "run", **{
        "data.train": f"mds:{folder}", "data.validation": None, "data.validation_fraction": 0.1,
        "tokenizer.path": str(tmp_path / "tok"), "data.store": str(tmp_path / "store"),
    })  # fmt: skip
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 0, lines
    documents = TokenStore(tmp_path / "store", "train").num_documents
    assert documents + TokenStore(tmp_path / "store", "validation").num_documents == len(DOCUMENTS)


def test_an_mds_dataset_in_s3_is_read_through_the_cache(writer: type, tmp_path: Path, bucket: str) -> None:  # noqa: F811
    import s3fs

    folder = write_dataset(writer, tmp_path / "ds", "zstd")
    s3fs.S3FileSystem().put(str(folder), f"{bucket}/ds", recursive=True)
    cache = tmp_path / "cache"
    corpus = Corpus(f"mds:{bucket}/ds", cache=Cache(cache, 1e9))
    assert list(corpus) == DOCUMENTS
    assert len(list((cache / "copies").iterdir())) == len(list(folder.glob("shard.*")))  # each shard once


@pytest.mark.parametrize("case", ["no index.json", "not text"])
def test_an_mds_folder_without_an_index_or_a_text_column_is_one_line_and_writes_nothing(
    case: str, writer: type, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = write_dataset(writer, tmp_path / "ds", None)
    field = "text"
    if case == "no index.json":
        (folder / "index.json").unlink()
    else:
        field = "id"
    options = set_options(tiny_data, tmp_path / "run", **{
        "data.train": f"mds:{folder}", "data.text_field": field,
        "tokenizer.path": str(tmp_path / "tok"), "data.store": str(tmp_path / "store"),
    })  # fmt: skip
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 2
    needles = ["no index.json there", "mds:FOLDER"] if case == "no index.json" else ["column 'id' is int, not text"]
    assert_one_error_line(lines, "mlmtrain: data: MDS dataset", *needles)
    assert not (tmp_path / "tok").exists() and not (tmp_path / "store").exists()
