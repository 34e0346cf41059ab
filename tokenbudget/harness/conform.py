"""Conformance: the reference model against a real engine's scheduler (a ``ConformEngine``)."""
from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Hashable, Optional

from ..model import ConfigError
from ..spec.trace import StepExpectation, Trace, ViolationExpectation, write_trace
from .known_divergences import KnownDivergence
from .lockstep import Lockstep
from ..spec.shrink import cut_after_step, shrink

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ConformEngine:
    """The real engine a conformance run drives: its workloads, its lockstep run against the
    model and its documented divergences."""

    name: str  # the --engine name
    label: str  # as printed: "vLLM", "SGLang"
    release: str
    model_version: str
    warning: Optional[str]
    policy: str  # the model policy compared
    workload: Callable[[int, int], Trace]
    lockstep: Callable[[Trace], Lockstep]
    explain: Callable[[Lockstep], Optional[KnownDivergence]]


@dataclass(frozen=True)
class Divergence:
    """A workload on which the model and the engine disagree: the (shrunk) trace written for it,
    the lockstep result of that trace, and the SPEC.md entry that explains it, if any."""

    workload: int
    trace: Path
    result: Lockstep
    explanation: KnownDivergence | None

    @property
    def predicted(self) -> bool:
        """The engine raised where the model reports a finding's invariant, every step before agreeing:
        the model foretold the crash."""
        return self.explanation is not None and self.explanation.kind == "finding" and self.result.predicted_failure

    def to_json(self) -> dict[str, Any]:
        r = self.result
        assert r.model is not None and r.engine is not None
        return {
            "workload": self.workload, "trace": str(self.trace), "step": r.step, "fields": list(r.fields),
            "model": r.model.to_json(), "engine": r.engine.to_json(), "predicted": self.predicted,
            "explanation": self.explanation.to_json() if self.explanation else None,
        }


@dataclass
class ConformReport:
    """The outcome of a conformance run; ``coverage`` counts workloads per exercised feature."""

    engine: str
    seed: int
    workloads: int
    label: str  # the engine as printed
    policy: str  # the model policy compared
    release: str = "?"  # the engine release driven
    model_version: str = "?"  # the modelled version it is compared with
    warning: str | None = None  # the release is not modelled: the version used instead
    agreeing: int = 0
    steps_agreeing: int = 0
    seconds: float = 0.0
    corpus: Path | None = None
    divergences: list[Divergence] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=Counter)

    @property
    def predicted_crashes(self) -> int:
        return sum(d.predicted for d in self.divergences)

    @property
    def agreement(self) -> float:
        """Workloads that agree step for step or up to a crash the model foretold, of all run."""
        return (self.agreeing + self.predicted_crashes) / self.workloads if self.workloads else 1.0

    @property
    def unexplained(self) -> list[Divergence]:
        return [d for d in self.divergences if d.explanation is None]

    @property
    def ok(self) -> bool:
        return not self.unexplained

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "engine": self.engine, "policy": self.policy, "release": self.release,
            "model_version": self.model_version,
            "warning": self.warning, "seed": self.seed, "workloads": self.workloads,
            "agreeing": self.agreeing, "predicted_crashes": self.predicted_crashes,
            "agreement": round(self.agreement, 6), "steps_agreeing": self.steps_agreeing,
            "seconds": round(self.seconds, 2), "corpus": str(self.corpus) if self.corpus else None,
            "divergences": [d.to_json() for d in self.divergences],
            "unexplained": len(self.unexplained), "coverage": dict(sorted(self.coverage.items())),
        }


def run_conformance(seed: int, workloads: int, corpus: Path | None = None,
                    progress: Progress = lambda _: None, *, engine: ConformEngine) -> ConformReport:
    """Compare the model and a real engine on ``workloads`` workloads of
    ``seed``; write each divergence's trace under ``corpus`` (default: a new temp dir, made
    at the first one).

    Raises EngineUnavailable without the engine, OSError when the corpus cannot be written.
    """
    report = ConformReport(engine=engine.name, seed=seed, workloads=workloads, corpus=corpus,
                           release=engine.release, model_version=engine.model_version, warning=engine.warning,
                           label=engine.label, policy=engine.policy)
    started = time.perf_counter()
    for index in range(workloads):
        progress(f"conform: workload {index + 1}/{workloads}, {len(report.divergences)} divergences")
        trace = engine.workload(seed, index)
        result = engine.lockstep(trace)
        report.coverage.update(result.features)
        report.steps_agreeing += result.steps_agreeing
        if result.agrees:
            report.agreeing += 1
            continue
        report.divergences.append(_divergence(report, index, trace, result, engine))
    report.seconds = time.perf_counter() - started
    return report


def signature(result: Lockstep) -> Hashable:
    """How a lockstep run diverged, for shrinking: the differing fields, or the engine's error
    and the model's verdict on that step. None when it agreed."""
    if result.agrees:
        return None
    assert result.model is not None and result.engine is not None
    if result.engine_raised:
        return ("engine raised", result.engine.error, result.model.violations)
    return ("differs", result.fields, result.model.error)


def _divergence(report: ConformReport, index: int, trace: Trace, result: Lockstep,
                engine: ConformEngine) -> Divergence:
    wanted = signature(result)

    def same_divergence(candidate: Trace) -> bool:
        try:
            return signature(engine.lockstep(candidate)) == wanted
        except (ValueError, ConfigError):  # a candidate a side refuses is no counterexample
            return False

    cut = cut_after_step(trace, result.step or 0)
    small = shrink(cut if same_divergence(cut) else trace, same_divergence)
    small_result = engine.lockstep(small)
    if signature(small_result) != wanted:  # the rerun lost it: report the workload's own trace and run
        small, small_result = trace, result
    cut = cut_after_step(small, small_result.step or 0)
    small = cut if cut == small or same_divergence(cut) else small
    known = engine.explain(small_result)
    if report.corpus is None:
        report.corpus = Path(tempfile.mkdtemp(prefix="tokenbudget-conform-"))
    path = _write(report.corpus, f"conform-seed{report.seed}-w{index:04d}",
                  _annotated(small, small_result, report.seed, index, known, engine))
    return Divergence(index, path, small_result, known)


def _annotated(trace: Trace, result: Lockstep, seed: int, index: int, known: KnownDivergence | None,
               engine: ConformEngine) -> Trace:
    """The divergence trace: the engine's side as expectations, both sides in the description."""
    m, v, step = result.model, result.engine, result.step
    assert m is not None and v is not None and step is not None
    label = engine.label
    if v.error is not None:
        what = f"{label} raised {v.error}; the model reports {', '.join(m.violations) or 'no violation'}"
        expect: tuple[Any, ...] = tuple(ViolationExpectation(inv) for inv in m.violations)
    else:
        what = "; ".join(f"{f}: model {_show(getattr(m, f))}, {label} {_show(getattr(v, f))}" for f in result.fields)
        expect = (StepExpectation(step, dict(v.num_scheduled_tokens), dict(v.scheduled_draft_tokens), v.preempted,
                                  v.kv_blocks_in_use),)
    why = f" Explained by {known.spec}: {known.summary}." if known else " Unexplained."
    return replace(
        trace, expect=expect,
        description=f"Conformance divergence (seed {seed}, workload {index}) at step {step}: {what}.{why}",
        found_by=f"tokenbudget conform --engine {engine.name} --seed {seed} (workload {index})",
    )


def _show(value: object) -> str:
    if isinstance(value, frozenset):
        value = sorted(value)
    elif isinstance(value, tuple):
        value = list(value)
    return json.dumps(value)


def _write(directory: Path, stem: str, trace: Trace) -> Path:
    """Write the trace as ``stem.json`` in ``directory``, or ``stem-2.json``, ... if taken."""
    directory.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = directory / (f"{stem}.json" if n == 1 else f"{stem}-{n}.json")
        try:
            write_trace(trace, path)
            return path
        except FileExistsError:
            n += 1
