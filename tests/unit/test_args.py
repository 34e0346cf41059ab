"""The argument types shared by the commands: what they accept and what they refuse."""
from __future__ import annotations

import argparse
from typing import Callable

import pytest

from tokenbudget.args import positive_float, positive_int, whole


@pytest.mark.parametrize("parse, text, value", [
    (whole, "0", 0), (whole, "12", 12), (positive_int, "3", 3), (positive_float, "0.5", 0.5),
    (positive_float, "2", 2.0),
])
def test_accepts(parse: Callable[[str], float], text: str, value: float) -> None:
    assert parse(text) == value


@pytest.mark.parametrize("parse, text", [
    (whole, "-1"), (whole, "1.5"), (whole, "x"),
    (positive_int, "0"), (positive_int, "-2"), (positive_int, "2.5"), (positive_int, "x"),
    (positive_float, "0"), (positive_float, "-1e-9"), (positive_float, "nan"), (positive_float, "inf"),
    (positive_float, "soon"),
])
def test_refuses(parse: Callable[[str], float], text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=repr(text).replace(".", r"\.")):
        parse(text)
