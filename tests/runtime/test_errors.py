"""What a one-line error quotes of a library's exception: its first line, no terminal colours, never empty."""

from __future__ import annotations

from mlmtrain.errors import first_line


def test_first_line_drops_colour_codes_and_later_lines() -> None:
    error = ValueError("\x1b[31mError while deserializing header\x1b[0m: bad\nTraceback details")
    assert first_line(error) == "Error while deserializing header: bad"


def test_an_error_without_a_message_is_named_by_its_type() -> None:
    assert first_line(RuntimeError()) == "RuntimeError"
    assert first_line(OSError("  \n ")) == "OSError"
