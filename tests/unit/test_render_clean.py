"""``render.clean``: input text on one line, cut only where the note saying so is shorter."""
from __future__ import annotations

from tokenbudget.render import clean


def test_a_cut_is_made_only_when_the_note_is_shorter_than_the_rest() -> None:
    assert clean("max-model-len", 7) == "max-model-len"  # "... (6 more characters)" is longer than "en"
    long = "x" * 400
    assert clean(long) == "x" * 300 + "... (100 more characters)"


def test_control_characters_are_escaped_cut_or_not() -> None:
    assert clean("a\nb\x1b", 100) == "a\\nb\\x1b"
    assert clean("\n" * 100, 10) == "\\n" * 10 + "... (90 more characters)"
