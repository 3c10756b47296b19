"""Tests of mlmtrain.data.sources: every source type, the split by document, sharding, streaming and the user errors."""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from mlmtrain.config import DataConfig
from mlmtrain.data.sources import Corpus, CorpusStats, _hub_texts, corpus_splits, open_corpus, parse_hub_spec
from mlmtrain.errors import UserError


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", newline="")
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in records))


def write_parquet(path: Path, columns: dict[str, list]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, row_group_size=3)
    return path


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


def user_error(excinfo: pytest.ExceptionInfo) -> str:
    """The message of a UserError, checked to be the one line the CLI will print."""
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# Source types


def test_txt_one_document_per_line_skips_and_counts_empty_lines(tmp_path):
    path = write(tmp_path / "a.txt", "first doc\r\nsecond doc\n\n   \nthird\n")
    corpus = Corpus(str(path))
    assert list(corpus) == ["first doc", "second doc", "third"]
    size = path.stat().st_size  # input read: the whole file, line ends and blank lines included
    assert corpus.stats == CorpusStats(3, len("first docsecond docthird"), skipped_empty=2, input_bytes=size)


def test_txt_paragraph_mode_joins_lines_of_a_paragraph(tmp_path):
    path = write(tmp_path / "a.txt", "line one\n  line two  \n\n \t \npara two\n\n\n\nlast\nline")
    assert list(Corpus(str(path), txt_documents="paragraph")) == ["line one line two", "para two", "last line"]


def test_jsonl_reads_the_text_field_and_counts_null_as_empty(tmp_path):
    path = write_jsonl(
        tmp_path / "a.jsonl", [{"body": "one", "id": 1}, {"body": None, "id": 2}, {"body": "two", "id": 3}]
    )
    corpus = Corpus(str(path), text_field="body")
    assert list(corpus) == ["one", "two"]
    assert corpus.stats.skipped_empty == 1


def test_json_array_and_json_object_per_line(tmp_path):
    records = [{"text": f"document {i}\nwith a newline"} for i in range(5)]
    pretty = write(tmp_path / "pretty.json", json.dumps(records, indent=2))
    minified = write(tmp_path / "minified.json", json.dumps(records))
    per_line = write(tmp_path / "lines.json", "\n" + "".join(json.dumps(r) + "\n" for r in records))
    expected = [r["text"] for r in records]
    for path in (pretty, minified, per_line):
        assert list(Corpus(str(path))) == expected, path.name
    assert list(Corpus(str(write(tmp_path / "empty.json", "[ ]")))) == []


def test_parquet_reads_only_the_text_column_in_batches(tmp_path):
    texts = [f"row {i}" for i in range(10)]
    path = write_parquet(tmp_path / "a.parquet", {"id": list(range(10)), "content": texts})
    assert list(Corpus(str(path), text_field="content")) == texts


def test_csv_reads_the_text_column_including_quoted_newlines_and_commas(tmp_path):
    path = write_csv(tmp_path / "a.csv", [["id", "text"], ["1", "plain"], ["2", "has, comma\nand newline"], ["3", ""]])
    corpus = Corpus(str(path))
    assert list(corpus) == ["plain", "has, comma\nand newline"]
    assert corpus.stats.skipped_empty == 1


def test_gzip_compressed_text_and_jsonl(tmp_path):
    txt = write(tmp_path / "a.txt.gz", gzip.compress(b"alpha\nbeta\n"))
    jsonl = write(tmp_path / "b.jsonl.gz", gzip.compress(b'{"text": "gamma"}\n'))
    assert list(Corpus([str(txt), str(jsonl)])) == ["alpha", "beta", "gamma"]


def test_glob_matches_are_sorted_and_a_list_keeps_its_order(tmp_path):
    write(tmp_path / "b.txt", "from b\n")
    write(tmp_path / "a.txt", "from a\n")
    write(tmp_path / "c.jsonl", '{"text": "from c"}\n')
    assert list(Corpus(str(tmp_path / "*.txt"))) == ["from a", "from b"]
    assert list(Corpus(str(tmp_path / "[ab].*"))) == ["from a", "from b"]
    spec = [str(tmp_path / "c.jsonl"), str(tmp_path / "b.txt"), str(tmp_path / "a.txt")]
    assert list(Corpus(spec)) == ["from c", "from b", "from a"]


def test_a_folder_means_its_supported_files_recursively_sorted(tmp_path):
    write(tmp_path / "data" / "z.txt", "z\n")
    write(tmp_path / "data" / "sub" / "a.txt", "sub a\n")
    write(tmp_path / "data" / "b.jsonl", '{"text": "b"}\n')
    write(tmp_path / "data" / "README.md", "not text data\n")
    write(tmp_path / "data" / ".cache" / "x.txt", "hidden\n")
    assert list(Corpus(str(tmp_path / "data"))) == ["b", "sub a", "z"]


def test_builtin_python_docs_yields_many_clean_paragraphs():
    corpus = Corpus("builtin:python-docs")
    docs = list(corpus)
    assert len(docs) > 1000
    assert corpus.stats.bytes > 200_000
    assert all(len(d) >= 15 and "\n" not in d and "  " not in d for d in docs)
    assert any("assert" in d for d in docs)
    assert list(corpus) == docs  # re-iterable, same order
    assert len(set(docs)) == len(docs)  # pydoc's topics share sections: each paragraph comes once
    # prose, not markup: keywords without their quotes, headings without underlines, no examples or grammar
    assert "The break statement" in docs and not any('"break"' in d for d in docs)
    assert any("defined in a def statement" in d for d in docs)  # was 'a “"def"” statement'
    assert not any("“def”" in d or "“with”" in d for d in docs)
    assert not any("***" in d or ">>>" in d or "::=" in d for d in docs)


def test_builtin_python_docstrings_reads_the_standard_library_without_importing_it():
    import sys

    corpus = Corpus("builtin:python-docstrings")
    before = set(sys.modules)
    docs = list(corpus)
    assert "turtle" not in set(sys.modules) - before and "tkinter" not in set(sys.modules) - before  # parsed only
    assert len(docs) > 5000 and corpus.stats.bytes > 1_000_000
    assert all(len(d) >= 15 and "\n" not in d and ">>>" not in d for d in docs)
    assert "Return a list of lines from the stream." in docs  # io.IOBase.readlines, as written
    assert "docstrings" in corpus.describe()
    assert list(corpus) == docs  # the same order every pass (sorted files), as the store's fingerprint needs


def test_the_builtin_corpora_combine_as_a_list():
    both = Corpus(["builtin:python-docs", "builtin:python-docstrings"])
    assert both.describe().count("builtin:") == 2


# ---------------------------------------------------------------------------------------------
# Split, shards, stats


def test_validation_split_is_deterministic_by_document_disjoint_and_complete(tmp_path):
    docs = [f"document number {i}" for i in range(2000)]
    path = write(tmp_path / "a.txt", "\n".join(docs) + "\n" + docs[7] + "\n")  # one duplicate
    train, validation = corpus_splits(DataConfig(train=str(path), validation_fraction=0.2))
    train_docs, validation_docs = list(train), list(validation)
    assert set(train_docs).isdisjoint(validation_docs)
    assert sorted(train_docs + validation_docs) == sorted(docs + [docs[7]])
    assert 0.15 * len(docs) < len(validation_docs) < 0.25 * len(docs)
    assert list(train) == train_docs and list(validation) == validation_docs
    # the same document always goes to the same side, whatever the other documents are
    reordered = write(tmp_path / "b.txt", "\n".join(reversed(docs)) + "\n")
    _, other_validation = corpus_splits(DataConfig(train=str(reordered), validation_fraction=0.2))
    assert set(other_validation) == set(validation_docs)
    assert validation.stats.documents == len(validation_docs)
    # and in another process (another str hash seed): the split is a property of the text, not of the run
    script = (
        "import sys; from mlmtrain.config import DataConfig; from mlmtrain.data.sources import corpus_splits; "
        "print(len(list(corpus_splits(DataConfig(train=sys.argv[1], validation_fraction=0.2))[1])))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other_process = subprocess.run([sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True)
    assert other_process.stdout.strip() == str(len(validation_docs)), other_process.stderr


def test_splits_use_the_validation_source_when_given(tmp_path):
    train_path = write(tmp_path / "train.txt", "t1\nt2\n")
    validation_path = write(tmp_path / "val.txt", "v1\n")
    train, validation = corpus_splits(
        DataConfig(train=str(train_path), validation=str(validation_path), validation_fraction=0.5)
    )
    assert (list(train), list(validation)) == (["t1", "t2"], ["v1"])


def test_splits_without_validation_source_or_fraction_raise(tmp_path):
    path = write(tmp_path / "a.txt", "doc\n")
    with pytest.raises(UserError) as excinfo:
        corpus_splits(DataConfig(train=str(path), validation_fraction=0.0))
    assert "data.validation_fraction" in user_error(excinfo)


def test_shards_are_disjoint_complete_and_in_stream_order(tmp_path):
    docs = [f"doc {i}" for i in range(10)]
    path = write(tmp_path / "a.txt", "\n\n".join(docs))  # blank lines do not count as documents
    corpus = Corpus(str(path))
    shards = [list(corpus.iter_shard(index, 3)) for index in range(3)]
    assert shards == [docs[0::3], docs[1::3], docs[2::3]]
    assert corpus.stats.documents == len(docs[2::3])
    with pytest.raises(ValueError):
        corpus.iter_shard(3, 3)


def test_stats_are_reset_for_each_pass(tmp_path):
    corpus = Corpus(str(write(tmp_path / "a.txt", "one\n\ntwo\n")))
    list(corpus)
    list(corpus)
    assert corpus.stats == CorpusStats(documents=2, bytes=6, skipped_empty=1, input_bytes=9)


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    path = write(tmp_path / "a.txt", b"good line\nbad \xff\xfe line\n\xef\xbb\xbfnot a bom here\nalso \xc3 bad\n")
    corpus = Corpus(str(path))
    docs = list(corpus)
    assert docs[1] == "bad \ufffd\ufffd line" and docs[3] == "also \ufffd bad"
    assert len(docs) == 4
    assert corpus.stats.invalid_utf8_lines == 2


def test_a_leading_byte_order_mark_is_dropped(tmp_path):
    path = write(tmp_path / "a.csv", b"\xef\xbb\xbftext\r\nhello\r\n")
    assert list(Corpus(str(path))) == ["hello"]


def test_a_ten_megabyte_line_is_one_document(tmp_path):
    big = "word " * 2_000_000  # 10 MB
    path = write(tmp_path / "a.txt", "short\n" + big + "\n")
    assert [len(d) for d in Corpus(str(path))] == [5, len(big)]
    jsonl = write_jsonl(tmp_path / "b.jsonl", [{"text": big}])
    csv_path = write_csv(tmp_path / "c.csv", [["text"], [big]])
    assert [len(d) for d in Corpus([str(jsonl), str(csv_path)])] == [len(big), len(big)]


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".json", ".csv"])
def test_iteration_streams_instead_of_loading_the_file(tmp_path, suffix):
    lines = [f"streamed document number {i} " + "x" * 250 for i in range(20_000)]  # ~5.5 MB
    path = tmp_path / f"big{suffix}"
    if suffix == ".txt":
        write(path, "\n".join(lines))
    elif suffix == ".jsonl":
        write_jsonl(path, [{"text": line} for line in lines])
    elif suffix == ".json":
        write(path, json.dumps([{"text": line} for line in lines], indent=0))
    else:
        write_csv(path, [["text"]] + [[line] for line in lines])
    assert path.stat().st_size > 5_000_000
    corpus = Corpus(str(path))
    tracemalloc.start()
    try:
        count = sum(1 for _ in corpus)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == len(lines)
    assert peak < 1_000_000, f"peak {peak} bytes while streaming a {path.stat().st_size} byte file"


# ---------------------------------------------------------------------------------------------
# Describe, fingerprint


def test_describe_names_the_files_and_their_size(tmp_path):
    write(tmp_path / "a.txt", "x" * 1500)
    write(tmp_path / "b.txt", "y" * 1500)
    text = Corpus(str(tmp_path / "*.txt")).describe()
    assert text.startswith("2 files (3.0 KB): ") and "a.txt" in text and "b.txt" in text
    assert "python" in Corpus("builtin:python-docs").describe().lower()
    train, validation = corpus_splits(DataConfig(train=str(tmp_path / "a.txt"), validation_fraction=0.1))
    assert "validation" in validation.describe() and "10%" in validation.describe()


def test_fingerprint_follows_the_inputs_and_options(tmp_path):
    path = write(tmp_path / "a.txt", "one\n")
    base = Corpus(str(path)).fingerprint()
    assert Corpus(str(path)).fingerprint() == base
    assert Corpus(str(path), txt_documents="paragraph").fingerprint() != base
    assert Corpus(str(path), holdout_fraction=0.1, keep="train").fingerprint() != base
    write(path, "one\ntwo\n")
    assert Corpus(str(path)).fingerprint() != base


def test_open_corpus_uses_the_data_section_options(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"body": "b", "text": "t"}])
    assert list(open_corpus(str(path), DataConfig(text_field="body"))) == ["b"]


# ---------------------------------------------------------------------------------------------
# Hub datasets (the hub itself is out of reach in tests: parsing, the row reader, the offline error)


def test_hub_spec_parsing():
    assert parse_hub_spec("hf:wikitext/wikitext-2-raw-v1:train") == ("wikitext", "wikitext-2-raw-v1", "train")
    assert parse_hub_spec("hf:imdb:test") == ("imdb", None, "test")
    assert parse_hub_spec("hf:Salesforce/wikitext/wikitext-2-raw-v1:train[:100]") == (
        "Salesforce/wikitext",
        "wikitext-2-raw-v1",
        "train[:100]",
    )
    for bad in ("hf:imdb", "hf::train", "hf:a//b:train", "hf:a/b/c/d:train"):
        with pytest.raises(UserError) as excinfo:
            Corpus(bad, key="data.validation")
        assert "data.validation" in user_error(excinfo) and "hf:NAME:SPLIT" in user_error(excinfo)


@pytest.mark.oldpins
def test_hub_rows_stream_through_the_text_field(tmp_path):
    import datasets

    path = write_jsonl(tmp_path / "rows.jsonl", [{"text": "first", "n": 1}, {"text": "second", "n": 2}])
    dataset = datasets.load_dataset("json", data_files=str(path), split="train", streaming=True)
    assert list(_hub_texts(dataset, "text", "hf:local:train")) == ["first", "second"]
    with pytest.raises(UserError) as excinfo:
        list(_hub_texts(dataset, "content", "hf:local:train"))
    assert "'content'" in user_error(excinfo) and "text, n" in user_error(excinfo)
    # rows whose fields are not known up front are checked one by one
    with pytest.raises(UserError, match=r"no field 'text' \(fields: n\)"):
        list(_hub_texts(iter([{"text": "a", "n": 1}, {"n": 2}]), "text", "hf:local:train"))


def test_an_unreachable_hub_dataset_is_a_user_error(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    # offline mode makes the hub client fail at once instead of retrying for a minute
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    corpus = Corpus("hf:no-such-org/no-such-dataset/x:train")
    with pytest.raises(UserError) as excinfo:
        next(iter(corpus))
    assert "cannot load hub dataset hf:no-such-org/no-such-dataset/x:train" in user_error(excinfo)


# ---------------------------------------------------------------------------------------------
# User errors: one line that names the key or file and the fix


def test_missing_file_names_the_key_and_path(tmp_path):
    with pytest.raises(UserError) as excinfo:
        Corpus(str(tmp_path / "nope.txt"), key="data.validation")
    message = user_error(excinfo)
    assert "data.validation" in message and "nope.txt" in message and "does not exist" in message


def test_glob_without_matches(tmp_path):
    with pytest.raises(UserError) as excinfo:
        Corpus(str(tmp_path / "*.txt"))
    assert "data.train: no file matches" in user_error(excinfo) and "*.txt" in user_error(excinfo)


def test_unsupported_extension_names_the_supported_ones(tmp_path):
    for name in ("a.docx", "a.parquet.gz"):
        with pytest.raises(UserError) as excinfo:
            Corpus(str(write(tmp_path / name, "x")))
        message = user_error(excinfo)
        assert name in message and ".txt" in message and ".parquet" in message and ".jsonl.gz" in message


def test_folder_without_supported_files(tmp_path):
    write(tmp_path / "notes.md", "x")
    with pytest.raises(UserError) as excinfo:
        Corpus(str(tmp_path))
    assert "holds no" in user_error(excinfo) and str(tmp_path) in user_error(excinfo)


def test_empty_spec_and_unknown_builtin():
    for spec in ([], "", ["  "]):
        with pytest.raises(UserError, match="data.train names no source"):
            Corpus(spec)
    with pytest.raises(UserError, match="python-docs, python-docstrings"):
        Corpus("builtin:wikipedia")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.jsonl", "fields: body, id"),
        ("a.json", "fields: body, id"),
        ("a.parquet", "columns: body, id"),
        ("a.csv", "columns: body, id"),
    ],
)
def test_missing_text_field_names_the_file_and_what_exists(tmp_path, name, expected):
    path = tmp_path / name
    if name.endswith(".parquet"):
        write_parquet(path, {"body": ["x"], "id": [1]})
    elif name.endswith(".csv"):
        write_csv(path, [["body", "id"], ["x", "1"]])
    elif name.endswith(".json"):
        write(path, json.dumps([{"body": "x", "id": 1}]))
    else:
        write_jsonl(path, [{"body": "x", "id": 1}])
    with pytest.raises(UserError) as excinfo:
        list(Corpus(str(path)))
    message = user_error(excinfo)
    assert name in message and "'text'" in message and expected in message and "data.text_field" in message


def test_malformed_records_name_the_file_and_line(tmp_path):
    jsonl = write(tmp_path / "a.jsonl", '{"text": "ok"}\n{"text": \n')
    with pytest.raises(UserError, match=r"a\.jsonl:2: not valid JSON"):
        list(Corpus(str(jsonl)))
    array = write(tmp_path / "b.json", '[{"text": "ok"}, {"text": ')
    with pytest.raises(UserError, match=r"b\.json: not a valid JSON array"):
        list(Corpus(str(array)))
    numbers = write_jsonl(tmp_path / "c.jsonl", [{"text": 5}])
    with pytest.raises(UserError, match=r"c\.jsonl:1: field 'text' holds int, not text"):
        list(Corpus(str(numbers)))
    not_objects = write(tmp_path / "d.json", "[1, 2]")
    with pytest.raises(UserError, match=r"d\.json item 1: expected a JSON object"):
        list(Corpus(str(not_objects)))


def test_unreadable_file(tmp_path, monkeypatch):
    path = write(tmp_path / "secret.txt", "x\n")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads anything: let the permission check see what any other user would
        monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    try:
        with pytest.raises(UserError) as excinfo:
            Corpus(str(path))
    finally:
        path.chmod(0o600)
    assert "secret.txt" in user_error(excinfo) and "permission" in user_error(excinfo)


def test_corrupt_files_fail_while_reading_with_the_file_named(tmp_path):
    truncated = write(tmp_path / "a.txt.gz", gzip.compress(b"some text\n" * 1000)[:-40])
    with pytest.raises(UserError, match=r"cannot read .*a\.txt\.gz"):
        list(Corpus(str(truncated)))
    fake = write(tmp_path / "b.parquet", b"not parquet at all")
    with pytest.raises(UserError, match=r"cannot read .*b\.parquet as parquet"):
        list(Corpus(str(fake)))


def test_a_damaged_gzip_stream_is_a_data_error(tmp_path):
    words = [f"word{i % 97} and{i % 13} text{i % 31}" for i in range(3000)]
    packed = bytearray(gzip.compress("\n".join(words).encode()))
    packed[50:58] = b"\xff" * 8  # damage inside the deflate stream: zlib's own error, not gzip's OSError
    path = write(tmp_path / "damaged.txt.gz", bytes(packed))
    with pytest.raises(UserError, match="damaged.txt.gz"):
        list(Corpus(str(path)))


@pytest.mark.parametrize("name", ["deep.jsonl", "deep.json"])
def test_json_nested_too_deeply_is_a_data_error(tmp_path, name):
    deep = "[" * 200_000
    content = f'{{"text": "fine"}}\n{{"text": {deep}\n' if name.endswith("l") else f'[{{"text": "fine"}}, {deep}\n'
    path = write(tmp_path / name, content)
    with pytest.raises(UserError, match="nested too deeply"):
        list(Corpus(str(path)))


@pytest.mark.parametrize("name", ["huge.jsonl", "huge.json"])
def test_an_integer_too_long_to_convert_is_a_data_error(tmp_path, name):
    """Python refuses integers of over 4,300 digits with a ValueError, which used to escape as a traceback."""
    huge = "1" * 5000
    content = f'{{"text": "fine"}}\n{{"text": "x", "n": {huge}}}\n' if name.endswith("l") else f'[{{"n": {huge}}}]\n'
    path = write(tmp_path / name, content)
    with pytest.raises(UserError, match=r"huge\.jsonl:2: cannot read this JSON|huge\.json: an item cannot be read"):
        list(Corpus(str(path)))
