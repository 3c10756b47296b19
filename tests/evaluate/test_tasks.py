"""Tests of mlmtrain.evaluate.tasks' files: the records a task file holds, as csv.DictReader, json and pyarrow read
them, and one line naming the file and the line for each kind of broken file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlmtrain.errors import UserError
from mlmtrain.evaluate.tasks import task_records


def test_csv_records_keep_quoted_line_ends_and_read_numbers(tmp_path: Path) -> None:
    """A byte-order mark, CR LF, a lone CR, a blank line, a short row: what csv.DictReader made of them."""
    path = tmp_path / "a.csv"
    path.write_bytes(b'\xef\xbb\xbftext,label\r\n"two\r\nlines, a comma",1\rshort\n\n  x ,2.5\n')
    assert task_records(path) == [
        {"text": "two\r\nlines, a comma", "label": 1},
        {"text": "short", "label": None},
        {"text": "  x ", "label": 2.5},
    ]


def test_jsonl_records_end_at_lf_cr_lf_or_a_lone_cr_only(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = ['\ufeff{"text": "a", "label": 1}\r', '{"text": "b", "label": "x"}\r\n', "\n", "   \n"]
    lines.append('{"text": "c\u2028d"}\n')  # a Unicode line separator inside a line is no line end
    path.write_bytes("".join(lines).encode())
    assert task_records(path) == [{"text": "a", "label": 1}, {"text": "b", "label": "x"}, {"text": "c\u2028d"}]


def test_parquet_records_are_the_whole_table_in_order(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    rows = [{"text": f"row {i}", "label": i % 3, "score": i / 7} for i in range(700)]  # several row groups, batches
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=300)
    assert task_records(path) == pq.read_table(path).to_pylist() == rows


def test_a_long_csv_text_is_one_field(tmp_path: Path) -> None:
    """The csv module's 128 KiB cap on a field used to refuse a long task text as an unreadable file."""
    path = tmp_path / "a.csv"
    path.write_text(f"text,label\n{'word ' * 40_000},1\n", encoding="utf-8")
    assert len(task_records(path)[0]["text"]) == 200_000


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("bytes.jsonl", b'{"text": "a"}\n{"text": "b"}\n{"text": "\xff"}\n', "bytes.jsonl:3: not valid UTF-8"),
        ("bytes.csv", b"text,label\na,1\n\xff,2\n", "bytes.csv:3: not valid UTF-8"),
        ("deep.jsonl", b'{"text": "a"}\n' + b"[" * 200_000 + b"\n", "deep.jsonl:2: JSON nested too deeply"),
        ("huge.jsonl", b'{"text": "a", "label": ' + b"1" * 5000 + b"}\n", "huge.jsonl:1: cannot read this JSON"),
        ("huge.csv", b"text,label\na," + b"1" * 5000 + b"\n", "huge.csv:2: Exceeds the limit"),
        ("list.jsonl", b'{"text": "a"}\n[1]\n', "list.jsonl:2: expected a JSON object, found list"),
        ("bad.jsonl", b'{"text": "a"}\n{"text": \n', "bad.jsonl:2: not valid JSON"),
    ],
)
def test_a_broken_task_file_is_one_line_naming_the_line(tmp_path: Path, name: str, content: bytes, needle: str) -> None:
    """Bad bytes used to name only the file, and deep nesting was a traceback."""
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError) as excinfo:
        task_records(path)
    message = str(excinfo.value)
    assert message.startswith("task: ") and needle in message and "\n" not in message, message


def test_a_task_file_of_another_kind_names_the_kinds(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text(json.dumps([{"text": "a", "label": 1}]), encoding="utf-8")
    with pytest.raises(UserError, match=r"train\.json has an unsupported extension; use one of .jsonl, .csv, .parquet"):
        task_records(path)
