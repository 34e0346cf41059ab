"""Every shipped corpus trace replays on the model with its expectations met."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import load_trace

pytestmark = pytest.mark.regression


def test_the_corpus_is_shipped() -> None:
    names = {p.name for p in corpus_paths()}
    assert {"seed-000-vllm-adaptive.json", "seed-000-vllm-static-refused.json",
            "fastdeploy-reserve-rows-overflow.json"} <= names


@pytest.mark.parametrize("path", corpus_paths(), ids=lambda p: p.stem)
def test_corpus_trace_meets_its_expectations(path: Path) -> None:
    trace = load_trace(path)
    assert trace.description and trace.expect, "corpus traces carry a description and expectations"
    result = replay_on_model(trace)
    assert result.ok, "; ".join(result.problems)
