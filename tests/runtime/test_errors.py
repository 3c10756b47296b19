"""What a one-line error quotes of a library's exception: its first line, no terminal colours, never empty."""

from __future__ import annotations

import pytest

from mlmtrain.errors import first_line, redact, shown


def test_first_line_drops_colour_codes_and_later_lines() -> None:
    error = ValueError("\x1b[31mError while deserializing header\x1b[0m: bad\nTraceback details")
    assert first_line(error) == "Error while deserializing header: bad"


def test_an_error_without_a_message_is_named_by_its_type() -> None:
    assert first_line(RuntimeError()) == "RuntimeError"
    assert first_line(OSError("  \n ")) == "OSError"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("API request to http://user:s3cret@127.0.0.1:5000/api failed", "http://user:***@127.0.0.1:5000/api"),
        ("https://alice:p@ss/w0rd@hub.example/x", "https://alice:***@hub.example/x"),
        ("clone https://hf_abcdefghijkl@huggingface.co/x", "https://***@huggingface.co/x"),
        ("HTTPConnection(host='user:s3cret@10.0.0.1', port=80)", "host='user:***@10.0.0.1'"),
        ("token hf_abcdefghijklmnopqrstuvwxyz rejected", "token hf_*** rejected"),
        ("headers {'Authorization': 'Bearer s3cret.part-2'}", "{'Authorization': 'Bearer ***'}"),
        ("Authorization: Basic dXNlcjpzM2NyZXQ=", "Authorization: Basic ***"),
        ("GET /api?token=s3cret&page=2", "?token=***&page=2"),
        ("login failed: password=s3cret, api_key=s3cret", "password=***, api_key=***"),
        ('{"access_token": "s3cret", "password": "s3cret"}', '{"access_token": "***", "password": "***"}'),
        ("password: s3cret", "password: ***"),
    ],
)
def test_redact_hides_every_shape_of_credential(text: str, expected: str) -> None:
    redacted = redact(text)
    assert expected in redacted and "s3cret" not in redacted and "hf_abcdefghijkl" not in redacted
    assert first_line(ValueError(text)) == redacted


def test_redact_leaves_ordinary_text_alone() -> None:
    text = "the mask token: [MASK] is missing; tokens=512 at http://127.0.0.1:8080/path in runs/a@b"
    assert redact(text) == text


def test_shown_quotes_a_huge_value_in_a_few_characters_without_writing_it_out() -> None:
    nested: list = ["x"] * 9
    for _ in range(9):
        nested = [nested] * 9  # 9**10 strings once written out: str() would not end
    assert len(shown(nested)) <= 60
    assert shown("y" * 10_000) == "'yyyyyyyyyyyy'... (10,000 characters)"
    assert shown(int("9" * 400)) == "999999999999... (400 characters)"
    assert shown(10**5000) == "an integer of thousands of digits"
    assert (shown("fast"), shown(1e-3), shown(None)) == ("'fast'", "0.001", "None")
