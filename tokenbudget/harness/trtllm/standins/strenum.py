"""``strenum`` (PyPI), which scheduler.py:14 imports for a type hint of SimpleUnifiedScheduler; the
standard library's StrEnum when the package is not installed."""
from enum import StrEnum

__all__ = ["StrEnum"]
