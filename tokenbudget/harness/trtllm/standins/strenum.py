"""``strenum`` (PyPI), which scheduler.py:14 imports for a type hint of SimpleUnifiedScheduler:
a str-valued Enum, as the standard library's StrEnum (Python 3.11) is."""
from enum import Enum

__all__ = ["StrEnum"]


class StrEnum(str, Enum):
    """Members are strings, and print as their values."""

    def __str__(self) -> str:
        return str(self.value)
