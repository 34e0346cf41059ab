"""The verdict on a policy's violations: known, its own, or a work gap over its base."""
from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

from .model import POLICY_ERROR, BudgetConfig, ConfigError, builtin_policies, get_policy
from .model.findings import findings_of, shown_finding
from .model.replay import BadInput, ReplayResult, replay_on_model
from .model.base_gap import GapComparison, base_policy, exceeds, gap_against_base
from .spec.corpus import load_corpus
from .spec.invariants import CONFIG, EFFICIENCY, INVARIANTS
from .spec.records import RunRecord
from .spec.trace import Trace, ViolationExpectation

if TYPE_CHECKING:
    from .proofs.manifest import Expected
    from .proofs.verdicts import Outcome

KNOWN, OWN, GAP = "known", "own", "gap over base"
MANIFEST_REFUTED = "refuted"  # proofs.verdicts.REFUTED as the manifest records it (a test pins the two)
MAX_CACHED = 256  # replays kept: the corpus twice over


@dataclass(frozen=True)
class Verdict:
    """One violated invariant of one run, judged: ``where`` names what showed it (one
    line), ``known`` why it is not the policy's own, ``gap`` the comparison with the base
    of a gap over it."""

    invariant: str
    where: str
    known: Optional[str] = None
    gap: Optional[GapComparison] = None

    @property
    def kind(self) -> str:
        return KNOWN if self.known is not None else GAP if self.gap is not None else OWN

    def fails(self, strict: bool) -> bool:
        return self.known is None or strict

    def phrase(self, strict: bool = False, max_work_gap: int = 0) -> str:
        """``known (why)`` (``, failing under --strict``), ``its own violation``, or the gap
        against the base with what is allowed."""
        if self.known is not None:
            return f"known ({self.known})" + (", failing under --strict" if strict else "")
        if self.gap is not None:
            return f"{self.gap} (allowed: {max_work_gap} more)"
        return "its own violation"


def failed(verdicts: Iterable[Verdict], strict: bool) -> bool:
    """The one exit rule: whether some verdict fails (its own, a gap, or known under ``strict``)."""
    return any(v.fails(strict) for v in verdicts)


@dataclass
class Judge:
    """The verdicts of one policy (a built-in's name or ``pkg.module:Class``). ConfigError
    when it cannot be loaded."""

    policy: str
    max_work_gap: int = 0

    def __post_init__(self) -> None:
        self.builtin = self.policy in builtin_policies()
        self.base = None if self.builtin else base_policy(get_policy(self.policy))

    def of_run(self, trace: Trace, result: ReplayResult, where: str, gap: bool = True) -> list[Verdict]:
        """Every invariant ``result`` (the run of ``trace`` under the policy) violated, once,
        judged on that run; with ``gap``, also a gap over the base (its run replayed once)."""
        out = []
        for invariant in dict.fromkeys(v.invariant for v in result.violations):
            first = next(v for v in result.violations if v.invariant == invariant)
            out.append(self.of_violation(invariant, trace, f"{where}: {first}", result.run))
        if gap and not any(v.invariant == EFFICIENCY_ID for v in out):
            comparison = self.gap(trace, result.run)
            if exceeds(comparison, self.max_work_gap):
                out.append(Verdict(EFFICIENCY_ID, f"{where}: {EFFICIENCY_ID}: {comparison}", gap=comparison))
        return out

    def of_violation(self, invariant: str, trace: Trace, where: str, run: Optional[RunRecord] = None) -> Verdict:
        """The verdict on a violation of ``invariant`` that ``trace`` shows under the policy
        (``run``: its run when made, else replayed). A work-conserving violation is a gap its
        finder judged against the base already (the fuzzer, ``replay_judged``)."""
        if invariant == POLICY_ERROR:
            return Verdict(invariant, where)
        if _kind(invariant) == EFFICIENCY:
            return Verdict(invariant, where, gap=self.gap(trace, run))  # None: the replay here shows no gap
        return Verdict(invariant, where, known=self.known_why(invariant, trace, run))

    def of_refutation(self, obligation: str, traces: Sequence[Trace], where: str) -> Optional[Verdict]:
        """The verdict on a refutation by the prover (its counterexample ``traces``); None
        when it does not count against the policy: an obligation that is no invariant, or
        a work gap within ``max_work_gap`` of the base's."""
        if obligation not in INVARIANTS or not traces:
            return None
        if _kind(obligation) == EFFICIENCY:
            worst = max((c for c in (self.gap(t) for t in traces) if c is not None), key=lambda c: c.excess,
                        default=None)
            return Verdict(obligation, where, gap=worst) if exceeds(worst, self.max_work_gap) else None
        return self.of_violation(obligation, traces[0], where)

    def known_why(self, invariant: str, trace: Trace, run: Optional[RunRecord] = None) -> Optional[str]:
        """Why the violation is not the policy's own, one phrase, or None: a finding whose matcher
        recognises it before a built-in's record, which says less."""
        finding = self._finding(invariant, trace, run)
        if finding is not None:
            return finding
        if self.builtin and invariant in recorded_violations(self.policy):
            return f"{self.policy}'s own record"
        if self.base is not None and _kind(invariant) == CONFIG and base_shows(trace, invariant, self.base):
            return f"its base {self.base} shows it on the same trace"
        return None

    def gap(self, trace: Trace, run: Optional[RunRecord] = None) -> Optional[GapComparison]:
        """Where the policy leaves the most work undone beyond its base on the same state
        (``base_gap.gap_against_base``), or None (no base, a run refused, no excess)."""
        if self.base is None:
            return None
        ours = run if run is not None else _run(replayed(trace, self.policy))
        theirs = _run(replayed(trace, self.base))
        if ours is None or theirs is None:
            return None
        return gap_against_base(None, self.policy, ours, theirs)

    def _finding(self, invariant: str, trace: Trace, run: Optional[RunRecord]) -> Optional[str]:
        policy = get_policy(self.policy)
        engine = getattr(policy, "engine", None)  # a user policy need not name one
        try:
            cfg = BudgetConfig.from_dict(trace.config)
        except ConfigError:
            return None
        version = policy.engine_version(cfg)
        if not any(f.invariant == invariant and f.opens(policy, cfg) for f in findings_of(engine, version)):
            return None
        if run is None:
            run = _run(replayed(trace, self.policy))
        finding = None if run is None else shown_finding(engine, invariant, cfg, run, version)
        return None if finding is None else f"finding {finding.id}, {finding.spec}"


EFFICIENCY_ID = next(i.id for i in INVARIANTS.values() if i.kind == EFFICIENCY)


def _kind(invariant: str) -> Optional[str]:
    found = INVARIANTS.get(invariant)
    return None if found is None else found.kind


def base_shows(trace: Trace, invariant: str, base: str) -> bool:
    """Whether the built-in policy ``base`` shows the violation of ``invariant`` on ``trace``:
    for ``config-complete`` it refuses the config too; for ``config-sound`` it accepts the
    config and its first step grants nothing; otherwise its run violates ``invariant``."""
    try:
        cfg = BudgetConfig.from_dict(trace.config)
    except ConfigError:
        return False
    try:
        get_policy(base).validate(cfg)
    except ConfigError:
        return invariant == "config-complete"
    result = replayed(trace, base)
    if result is None:
        return False
    if _kind(invariant) == CONFIG:
        return invariant == "config-sound" and bool(result.steps) and result.steps[0].tokens == 0
    return any(v.invariant == invariant for v in result.violations)


# -- the runs this module makes, once per (trace, policy) -------------------------------
_REPLAYED: dict[tuple[int, str], tuple[Trace, Optional[ReplayResult]]] = {}


def replayed(trace: Trace, policy: str) -> Optional[ReplayResult]:
    """The replay of ``trace`` (its expectations aside) under ``policy`` on the model, made
    once per trace object and policy in this process; None when it cannot replay (BadInput)."""
    key = (id(trace), policy)
    hit = _REPLAYED.get(key)
    if hit is not None and hit[0] is trace:
        return hit[1]
    try:
        result: Optional[ReplayResult] = replay_on_model(replace(trace, expect=()), policy)
    except BadInput:
        result = None
    if len(_REPLAYED) >= MAX_CACHED:
        del _REPLAYED[next(iter(_REPLAYED))]
    _REPLAYED[key] = (trace, result)  # the trace held here keeps its id from being reused
    return result


def _run(result: Optional[ReplayResult]) -> Optional[RunRecord]:
    return None if result is None else result.run


# -- a built-in policy's own record -----------------------------------------------------
def recorded_violations(policy: str) -> frozenset[str]:
    """The invariants a built-in policy is known to violate by its own record: expected by a
    corpus trace of it, or refuted in the proofs' verdict manifest. Empty for a user policy."""
    return _recorded().get(policy, frozenset())


@functools.cache
def _recorded() -> dict[str, frozenset[str]]:
    """``recorded_violations`` of every policy, read once: the corpus and the manifest are package data."""
    out: dict[str, set[str]] = {}
    for t in load_corpus(findings=False):
        out.setdefault(t.policy, set()).update(e.violation for e in t.expect if isinstance(e, ViolationExpectation))
    for policy, cells in _manifest_verdicts().items():
        out.setdefault(policy, set()).update(name for name, cell in cells.items()
                                             if cell["verdict"] == MANIFEST_REFUTED)
    return {policy: frozenset(kinds) for policy, kinds in out.items()}


def _manifest_verdicts() -> dict[str, dict[str, Any]]:
    """policy -> obligation -> the manifest's entry, read as JSON: the prover's package is
    found, never imported (``proofs.manifest`` reads the same file for ``prove``)."""
    spec = importlib.util.find_spec(f"{__package__}.proofs")
    assert spec is not None and spec.submodule_search_locations, "the proofs package is installed"
    path = Path(next(iter(spec.submodule_search_locations))) / "manifest.json"
    if not path.is_file():
        return {}
    return json.loads(path.read_text("utf-8"))["verdicts"]  # type: ignore[no-any-return]


# -- the prover's outcomes ---------------------------------------------------------------
@dataclass
class Judgement:
    """The prover's outcomes judged: built-ins against the manifest, user policies by the
    rule above; ``complaints`` says what fails, ``verdicts`` each refutation's verdict (a
    built-in's refutation the manifest records is known by its own record)."""

    outcomes: list["Outcome"]
    expected: dict[tuple[str, str], Optional["Expected"]] = field(default_factory=dict)
    complaints: dict[tuple[str, str], str] = field(default_factory=dict)  # (policy, obligation) -> what is wrong
    verdicts: dict[tuple[str, str], Verdict] = field(default_factory=dict)  # (policy, obligation) -> a refutation's

    @property
    def problems(self) -> list[str]:
        return list(self.complaints.values())

    @property
    def ok(self) -> bool:
        return not self.complaints

    def to_json(self) -> dict[str, Any]:
        """Each outcome with the verdict and seconds the manifest records and whether it is as expected."""
        rows = []
        for o in self.outcomes:
            expected = self.expected.get((o.policy, o.obligation))
            verdict = self.verdicts.get((o.policy, o.obligation))
            rows.append({**o.to_json(), "expected": None if expected is None else expected.verdict,
                         "recorded_seconds": None if expected is None else expected.seconds,
                         "judged": None if verdict is None else verdict.kind,
                         "as_expected": (o.policy, o.obligation) not in self.complaints})
        return {"ok": self.ok, "outcomes": rows, "problems": self.problems}


def judge(outcomes: Sequence["Outcome"], max_work_gap: int = 0, strict: bool = False) -> Judgement:
    """Built-in policies against the verdict manifest (a flip, an unknown verdict or a pair
    it lacks is a complaint); a user policy fails on an unknown verdict and on every
    refutation whose verdict fails (``Verdict.fails``)."""
    from .proofs import manifest  # the prover's record, with its types: only prove and check judge outcomes
    from .proofs.verdicts import REFUTED, UNKNOWN

    recorded = manifest.load()
    out = Judgement(list(outcomes))
    judges: dict[str, Judge] = {}

    def judge_of(policy: str) -> Judge:
        if policy not in judges:
            judges[policy] = Judge(policy, max_work_gap)
        return judges[policy]

    for o in outcomes:
        key = (o.policy, o.obligation)
        complaint = None
        if o.policy in builtin_policies():
            out.expected[key] = manifest.expected_of(recorded, o)
            complaint = manifest.problem(o, out.expected[key])
            if complaint is None and o.verdict == REFUTED and o.obligation in INVARIANTS:
                why = judge_of(o.policy).known_why(o.obligation, o.traces[0]) if o.traces else None
                out.verdicts[key] = Verdict(o.obligation, f"prove: {o.obligation} refuted",
                                            known=why or f"{o.policy}'s own record")
        elif o.verdict == UNKNOWN:
            complaint = f"{o.policy} / {o.obligation}: unknown ({o.detail})"
        elif o.verdict == REFUTED:
            verdict = judge_of(o.policy).of_refutation(o.obligation, o.traces, f"prove: {o.obligation} refuted")
            if verdict is not None:
                out.verdicts[key] = verdict
                if verdict.fails(strict):
                    complaint = (f"{o.policy} / {o.obligation}: refuted, {verdict.phrase(strict, max_work_gap)} "
                                 f"({o.detail})")
        if complaint:
            out.complaints[key] = complaint
    return out
