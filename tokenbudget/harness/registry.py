"""The real engines: one line each, its name and the package whose ``ENGINE`` describes it
(``harness.engine_descriptor``). A package is imported when its engine is first asked for,
by name, as vLLM's KV-connector factory registers connectors."""
from __future__ import annotations

import importlib
from typing import Optional

from .engine_descriptor import EngineDescriptor

ENGINES = {  # name -> the package under tokenbudget.harness
    "vllm": "vllm",
    "sglang": "sglang",
    "fastdeploy": "fastdeploy",
    "trtllm": "trtllm",
}


def engine(name: str) -> EngineDescriptor:
    """The descriptor of the engine ``name`` (one of ``ENGINES``)."""
    descriptor: EngineDescriptor = importlib.import_module(f"{__package__}.{ENGINES[name]}").ENGINE
    return descriptor


def names(supporting: Optional[str] = None) -> tuple[str, ...]:
    """The registered engines, in registry order; those that support ``supporting``, if given."""
    return tuple(n for n in ENGINES if supporting is None or supporting in engine(n).supports)


def find(name: Optional[str]) -> Optional[EngineDescriptor]:
    """The descriptor of ``name``, or None when it names no real engine (``model``, ``runner``)."""
    return engine(name) if name in ENGINES else None
