"""Symbolic configs: BudgetConfig's knobs as z3 terms, run through the policy's own code.

A SymbolicConfig has BudgetConfig's field names. Its numeric knobs are z3 Ints (or
Bools) shared by every case; its categorical knobs (method, parallel_drafting,
scheduling_policy) are enumerated as *cases* of plain Python values, one per
combination the config and the policy's method table allow, and a z3 selector picks
one. For every case the prover calls the policy's own ``params``, ``lookahead``,
``requirements`` and ``shared_requirements`` (with BudgetConfig's structural ones) on a
view that holds the case's categorical values and the shared terms, then merges the
results with ``If`` over the selector (the method's name as a ``SymbolicMethod``).
Nothing of a policy is re-encoded here.

``max_num_scheduled_tokens`` is unset or set (a term) per SymbolicConfig, because
policies branch on ``is None`` in Python: a proof covers both by building two.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import Any, Optional, Sequence

import z3

from ..model import BudgetConfig, BudgetParams, BudgetPolicy, methods
from ..model.physical_need import PhysicalNeed, physical_need
from ..model.config import SCHEDULING_POLICIES, Requirement, structural_requirements
from ..spec.intlike import BoolLike, IntLike

# The domain of the config obligations: B up to 2^20, S up to 4096, k up to 32.
MAX_B, MAX_S, MAX_K = 1 << 20, 4096, 32

_BOOL_KNOBS = ("enable_chunked_prefill", "enable_prefix_caching")
_CATEGORICAL = ("method", "parallel_drafting", "scheduling_policy", "max_num_scheduled_tokens")
# The pass skeleton follows vLLM 0.32's loop (a self-preemption ends the running pass, no
# B // L sequence cap), so a policy that models 0.32 is proved at 0.32 (SPEC.md §8).
PROVED_VLLM_VERSION = "0.32"


@dataclass(frozen=True)
class Case:
    """One combination of the categorical knobs."""

    method: Optional[str]
    parallel_drafting: bool
    scheduling_policy: str

    def label(self) -> str:
        spec = "no speculation" if self.method is None else self.method + (" (parallel)" if self.parallel_drafting else "")
        return f"{spec}, {self.scheduling_policy}"


@dataclass(frozen=True)
class View:
    """A config as the policy's code reads it: BudgetConfig's fields, terms or values."""

    max_num_batched_tokens: Any
    max_num_seqs: Any
    max_num_scheduled_tokens: Any
    num_speculative_tokens: Any
    method: Optional[str]
    parallel_drafting: bool
    block_size: Any
    num_kv_blocks: Any
    max_model_len: Any
    long_prefill_token_threshold: Any
    scheduling_policy: str
    enable_chunked_prefill: Any
    enable_prefix_caching: Any
    engine_version: Optional[str] = None  # None: the policy's newest version
    async_scheduling: bool = False  # the pass skeleton follows the synchronous loop (SPEC.md §14)


assert {f.name for f in fields(View)} == {f.name for f in fields(BudgetConfig)}, "View must mirror BudgetConfig"


class SymbolicMethod:
    """``BudgetParams.method`` in the prover: the method of the case the selector picks.
    ``==`` and ``!=`` with a name (or None) give a z3 Bool; other uses of it are refused,
    because a Python branch on it would pick one case silently."""

    def __init__(self, selector: z3.ArithRef, names: Sequence[Optional[str]]) -> None:
        self.selector, self.names = selector, tuple(names)

    def __eq__(self, other: object) -> z3.BoolRef:  # type: ignore[override]
        return z3.Or([self.selector == i for i, name in enumerate(self.names) if name == other] or [z3.BoolVal(False)])

    def __ne__(self, other: object) -> z3.BoolRef:  # type: ignore[override]
        return z3.Not(self == other)

    def __bool__(self) -> bool:
        raise TypeError("BudgetParams.method is symbolic here; compare it with == (p.method == \"mtp\")")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SymbolicMethod({'|'.join(map(str, self.names))})"


def merge(selector: z3.ArithRef, values: Sequence[Any]) -> Any:
    """``values[selector]`` as one term; the value itself when all cases agree."""
    first = values[0]
    if all(_same(first, v) for v in values[1:]):
        return first
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = z3.If(selector == i, values[i], out)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, z3.ExprRef) or isinstance(b, z3.ExprRef):
        return isinstance(a, z3.ExprRef) and isinstance(b, z3.ExprRef) and a.eq(b)
    return type(a) is type(b) and a == b


class SymbolicConfig:
    """Every config of one policy with ``max_num_scheduled_tokens`` unset or set.

    Attributes: ``knobs`` (name -> z3 term), ``cases``, ``selector``, ``params`` (the
    merged BudgetParams), ``lookahead`` (L, the policy's reservation), ``need`` (the
    physical need of the engine's method table, ``model.physical_need``), ``drops_last_hit_block``, ``domain`` (what
    BudgetConfig accepts, within the issue's bounds) and ``accepts`` (what the policy's
    validation accepts, a z3 Bool; ``in_scope`` the same for its ``scope`` requirements).
    """

    def __init__(self, policy: BudgetPolicy, scheduled_tokens_set: bool, prefix: str = "",
                 fixed: Optional[dict[str, Any]] = None) -> None:
        """``fixed`` pins knobs to Python values (block_size=1, a concrete config, ...); a
        pinned ``max_num_scheduled_tokens`` (None: unset) overrides ``scheduled_tokens_set``."""
        fixed = dict(fixed or {})
        self.policy = policy
        self.scheduled_tokens_set = scheduled_tokens_set
        knobs: dict[str, Any] = {}
        for f in fields(BudgetConfig):
            if f.name in _CATEGORICAL:
                continue
            if f.name in fixed:
                knobs[f.name] = fixed[f.name]
            elif f.name == "engine_version":
                knobs[f.name] = PROVED_VLLM_VERSION if PROVED_VLLM_VERSION in policy.versions else None
            elif f.name == "async_scheduling":
                knobs[f.name] = False  # the skeleton has no in-flight step (SPEC.md §14)
            elif f.name in _BOOL_KNOBS:
                knobs[f.name] = z3.Bool(prefix + f.name)
            else:
                knobs[f.name] = z3.Int(prefix + f.name)
        if "max_num_scheduled_tokens" in fixed:
            knobs["max_num_scheduled_tokens"] = fixed["max_num_scheduled_tokens"]
        else:
            knobs["max_num_scheduled_tokens"] = z3.Int(prefix + "T") if scheduled_tokens_set else None
        self.knobs = knobs
        self.cases = [c for c in _cases(policy, fixed) if self._case_possible(c)]
        assert self.cases, f"{policy.name}: no categorical case is possible"
        self.selector = z3.Int(prefix + "case")
        views = [self.view(c) for c in self.cases]
        per_case = [policy.params(v) for v in views]
        merged = {f.name: merge(self.selector, [getattr(p, f.name) for p in per_case])
                  for f in fields(BudgetParams) if f.name != "method"}
        names = [p.method for p in per_case]
        method = names[0] if len(set(names)) == 1 else SymbolicMethod(self.selector, names)
        self.params: BudgetParams = BudgetParams(**merged, method=method)
        self.lookahead: IntLike = merge(self.selector, [policy.lookahead(v) for v in views])  # type: ignore[arg-type]
        needs = [physical_need(policy, v) for v in views]
        self.need = PhysicalNeed(needs[0].table, needs[0].version,
                                 *(merge(self.selector, [getattr(n, name) for n in needs])
                                   for name in ("lookahead", "draft_slots", "decode_rows")),
                                 needs[0].decodes_run_decode_rows)
        self.drops_last_hit_block: BoolLike = merge(
            self.selector,
            [methods.drops_last_hit_block(policy.table_for(v), c.method) for c, v in zip(self.cases, views)])
        self.case_requirements: list[list[Requirement]] = [policy.requirements(p) for p in per_case]
        select = [self.selector == i for i in range(len(self.cases))]
        self.accepts: z3.BoolRef = z3.Or([z3.And(s, policy.accepts(p)) for s, p in zip(select, per_case)])
        self.in_scope: z3.BoolRef = z3.Or([z3.And(s, policy.in_scope(p)) for s, p in zip(select, per_case)])
        bounds = [self.selector >= 0, self.selector < len(self.cases)]
        for name, top in (("max_num_batched_tokens", MAX_B), ("max_num_seqs", MAX_S),
                          ("num_speculative_tokens", MAX_K)):
            if isinstance(knobs[name], z3.ExprRef):
                bounds.append(knobs[name] <= top)
        self.domain: z3.BoolRef = z3.And(*bounds, z3.Or([
            z3.And(s, *(r.holds for r in self._shared(v))) for s, v in zip(select, views)]))

    def _shared(self, view: View) -> list[Requirement]:
        """BudgetConfig's structural requirements and the shared ones the policy keeps."""
        return [*structural_requirements(view), *self.policy.shared_requirements(view)]

    def _case_possible(self, case: Case) -> bool:
        """False when BudgetConfig or the policy refuses the case whatever the numbers."""
        return all(r.holds is not False for r in self._shared(self.view(case)))

    def view(self, case: Case) -> View:
        return View(**self.knobs, method=case.method, parallel_drafting=case.parallel_drafting,
                    scheduling_policy=case.scheduling_policy)

    def __getattr__(self, name: str) -> Any:
        knobs = self.__dict__.get("knobs", {})
        if name in knobs:
            return knobs[name]
        raise AttributeError(name)

    @property
    def k(self) -> IntLike:
        return self.knobs["num_speculative_tokens"]

    def concrete(self, model: z3.ModelRef) -> dict[str, Any]:
        """The BudgetConfig knobs of a model, every field spelled out."""
        case = self.cases[_int(model, self.selector)]
        out: dict[str, Any] = {}
        for f in fields(BudgetConfig):
            if f.name in ("method", "parallel_drafting", "scheduling_policy"):
                out[f.name] = getattr(case, f.name)
                continue
            value = self.knobs[f.name]
            if value is None or isinstance(value, (bool, int, str)):
                out[f.name] = value
            elif z3.is_bool(value):
                out[f.name] = z3.is_true(model.eval(value, model_completion=True))
            else:
                out[f.name] = _int(model, value)
        return out

    def requirement_failed(self, model: z3.ModelRef) -> Optional[str]:
        """The ConfigError message the policy's validation gives the model's config, if any."""
        try:
            self.policy.validate(BudgetConfig(**self.concrete(model)))
        except Exception as e:  # ConfigError; anything else is a policy bug worth showing
            return str(e)
        return None


def _cases(policy: BudgetPolicy, fixed: dict[str, Any]) -> list[Case]:
    table = sorted(methods.TABLES[policy.table])
    out = []
    for method, parallel, sched in itertools.product([None, *table], (False, True), SCHEDULING_POLICIES):
        case = Case(method, parallel, sched)
        if all(fixed.get(name, getattr(case, name)) == getattr(case, name)
               for name in ("method", "parallel_drafting", "scheduling_policy")):
            out.append(case)
    return out


def _int(model: z3.ModelRef, term: Any) -> int:
    if isinstance(term, int):
        return term
    return model.eval(term, model_completion=True).as_long()  # type: ignore[no-any-return]
