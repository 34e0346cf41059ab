"""The budget-policy interface and the parameters it reads.

A budget policy is the part of a scheduler that decides how much a scheduling pass may
spend. Every method that does arithmetic is written over ``IntLike`` so that the
reference scheduler (ints) and the prover (z3 terms) run the same code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from . import methods
from .config import BudgetConfig, ConfigError, Requirement, config_requirements
from ..spec.intlike import BoolLike, IntLike, and_, is_concrete, min_


@dataclass(frozen=True)
class BudgetParams:
    """The numbers a policy's arithmetic reads: ints for the model, z3 terms for the prover.

    ``decode_rows`` is what a decoding request physically runs on the engine's model
    runner; ``draft_slots`` (d) the extra runner rows every scheduled request occupies.
    ``method`` is the drafting method's name (None without speculation): compare it with
    ``==`` (``p.method == "mtp"``), which the prover answers with a z3 Bool over every method.
    """

    max_num_batched_tokens: IntLike  # B
    max_num_seqs: IntLike  # S
    num_speculative_tokens: IntLike  # k
    draft_slots: IntLike  # d
    decode_rows: IntLike  # rows of one decode step on the runner
    max_num_scheduled_tokens: Optional[IntLike]  # user override of T, None when unset
    spec_enabled: BoolLike
    is_mtp: BoolLike
    # Read by validation (``requirements``); enable_chunked_prefill also by the pass, as the
    # policy's engine honours it (FastDeploy's V1 scheduler always chunks):
    max_model_len: IntLike
    block_size: IntLike
    enable_chunked_prefill: BoolLike
    chunked_prefill_knob: BoolLike  # enable_chunked_prefill as the user set it, for validation
    parallel_drafting: BoolLike
    priority_scheduling: BoolLike  # scheduling_policy == "priority"
    method: Any = None  # the method's name: a str or None here, a ``proofs.symbolic.SymbolicMethod`` in the prover
    lookahead: IntLike = 0  # L: KV slots reserved past a request's scheduled tokens
    engine_version: Optional[str] = None  # the row of the policy's version table (None: no table)
    one_model: BoolLike = False  # the method drafts inside the target's forward (``MethodRow.one_model``)


def plain(*values: object) -> bool:
    """Contract helper: every value is a Python int (None, an untracked budget, is skipped).
    The PEP 316 contracts below hold on ints; CrossHair checks them (``tokenbudget/proofs/contracts``)."""
    return is_concrete(*(v for v in values if v is not None))


@dataclass(frozen=True)
class Budgets:
    """The two counters a pass spends. ``input`` is None for policies that keep only one."""

    token: IntLike
    input: Optional[IntLike]


class BudgetPolicy:
    """Base class of budget policies. Subclasses set the class attributes (``loop`` among
    them, or inherit it from a built-in policy) and override the arithmetic; the docstring
    of each names the engine, the version or PR, and what it deliberately leaves out.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    engine: ClassVar[str]
    version: ClassVar[str]
    table: ClassVar[str] = methods.DEFAULT_TABLE
    loop: ClassVar[type]  # the engine's loop, a ``loop.SchedulerLoop`` subclass: the pass's control flow
    refunds: ClassVar[bool] = True  # a same-step preemption gives the charge back
    versions: ClassVar[tuple[str, ...]] = ()  # the engine versions modelled, oldest first; () for one unnamed
    default_version: ClassVar[Optional[str]] = None  # what a config without engine_version follows; None: the newest

    def async_loop(self, cfg: BudgetConfig) -> type:
        """The loop of ``cfg.async_scheduling``; ConfigError where the engine has none."""
        raise ConfigError(f"{self.name} has no async scheduler; set async_scheduling to false (or pass --sync)")

    # -- configuration ---------------------------------------------------------------
    def validate(self, cfg: BudgetConfig) -> None:
        """Raise ConfigError (naming the knob to change) when the engine would refuse cfg:
        an engine version it does not model, a method outside its table (or parallel
        drafting its row has not), or the first of ``shared_requirements`` and then of
        ``requirements`` that fails."""
        wanted = getattr(cfg, "engine_version", None)
        if wanted is not None and wanted not in self.versions:
            if not self.versions:
                raise ConfigError(f"{self.name} models one {self.engine or 'engine'} version; remove engine_version "
                                  f"{wanted!r} from the config")
            raise ConfigError(f"{self.name} does not model engine_version {wanted!r}; set engine_version to one of "
                              f"{', '.join(self.versions)} (or leave it out for the newest)")
        table = self.table_for(cfg)
        if cfg.method is not None and cfg.method not in methods.TABLES[table]:
            known = ", ".join(sorted(methods.TABLES[table]))
            raise ConfigError(f"{self.name} does not model method {cfg.method!r}; set method to one of {known}")
        row = methods.method_row(table, cfg.method) if cfg.method is not None else None
        if row is not None and cfg.parallel_drafting and row.parallel_draft_slots is None:
            raise ConfigError(f"{self.name} models no parallel drafting for method {cfg.method!r}; set "
                              "parallel_drafting=false")
        for r in [*self.shared_requirements(cfg), *self.requirements(self.params(cfg))]:
            if not r.holds:
                raise ConfigError(r.message())

    def shared_requirements(self, c: Any) -> list[Requirement]:
        """What every engine asks of a config (``config.config_requirements``), as this
        policy's engine asks it. ``c`` has BudgetConfig's field names (the prover passes
        one whose numbers are z3 terms). Override to drop a requirement by its ``name``
        or to add one; BudgetConfig enforces the ``STRUCTURAL`` ones whatever this returns."""
        return config_requirements(c)

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        """The engine's acceptance conditions over IntLike, in the order it checks them.

        Written once: ``validate`` evaluates them on a concrete config, the prover on a
        symbolic one. Subclasses extend ``super().requirements(p)``.
        """
        return []

    def accepts(self, p: BudgetParams) -> BoolLike:
        """Whether every requirement holds (a z3 term when p is symbolic)."""
        return and_(*(r.holds for r in self.requirements(p)))

    def in_scope(self, p: BudgetParams) -> BoolLike:
        """Whether every ``scope`` requirement holds: the config uses only features the engine has."""
        return and_(*(r.holds for r in self.requirements(p) if r.scope))

    def engine_version(self, cfg: BudgetConfig) -> Optional[str]:
        """The engine version cfg asks for: its ``engine_version``, else the policy's default
        (``default_version`` where it models it, else the newest; None without versions)."""
        wanted = getattr(cfg, "engine_version", None)
        if wanted is not None:
            return wanted  # type: ignore[no-any-return]
        if not self.versions:
            return None
        return self.default_version if self.default_version in self.versions else self.versions[-1]

    def table_for(self, cfg: BudgetConfig) -> str:
        """The method table cfg is read with: the policy's own, or its version's."""
        return self.table

    def params(self, cfg: BudgetConfig) -> BudgetParams:
        """Concrete parameters of cfg under this policy's method table."""
        k = cfg.num_speculative_tokens
        spec = cfg.method is not None
        table = self.table_for(cfg)
        d = methods.draft_slots(table, cfg.method, k, cfg.parallel_drafting) if spec else 0
        rows = methods.decode_rows(table, cfg.method, k) if spec else 1
        return BudgetParams(
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs,
            num_speculative_tokens=k,
            draft_slots=d,
            decode_rows=rows,
            max_num_scheduled_tokens=cfg.max_num_scheduled_tokens,
            spec_enabled=spec,
            is_mtp=cfg.method == "mtp",
            max_model_len=cfg.max_model_len,
            block_size=cfg.block_size,
            enable_chunked_prefill=cfg.enable_chunked_prefill,
            chunked_prefill_knob=cfg.enable_chunked_prefill,
            parallel_drafting=cfg.parallel_drafting,
            priority_scheduling=cfg.scheduling_policy == "priority",
            method=cfg.method,
            lookahead=self.lookahead(cfg),
            engine_version=self.engine_version(cfg),
            one_model=methods.one_model(self.table_for(cfg), cfg.method),
        )

    def lookahead(self, cfg: BudgetConfig) -> int:
        """L: KV slots reserved past the scheduled tokens of each scheduled request."""
        return methods.lookahead(self.table_for(cfg), cfg.method, cfg.num_speculative_tokens) if cfg.method else 0

    # -- the budget arithmetic (IntLike) ---------------------------------------------
    def token_cap(self, p: BudgetParams) -> IntLike:
        """T: the most target tokens the engine claims to schedule in one step."""
        raise NotImplementedError

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        """Budgets at the start of a pass; num_decoding counts running requests past prefill."""
        raise NotImplementedError

    def may_schedule(self, p: BudgetParams, b: Budgets) -> BoolLike:
        """The loop-exit rule: False stops the pass from visiting further requests."""
        return b.token > 0

    def grant(self, p: BudgetParams, demand: IntLike, b: Budgets) -> IntLike:
        """Tokens given to a request asking for ``demand`` with budgets ``b`` left: at least
        one while the exit rule lets the pass go on, never more than asked or left.

        pre: plain(demand, b.token, b.input, p.draft_slots) and p.draft_slots >= 0 and demand >= 1
        pre: self.may_schedule(p, b)
        post: 0 < __return__ <= demand and __return__ <= b.token
        """
        return min_(demand, b.token)

    def charge(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> Budgets:
        """What scheduling ``grant`` tokens subtracts from each budget: nothing negative, and
        an input budget is charged at least the runner rows the grant occupies.

        pre: plain(grant, p.draft_slots, p.decode_rows, p.block_size) and grant >= 1 and p.draft_slots >= 0
        pre: p.block_size >= 1
        pre: isinstance(is_decode, bool)
        post: __return__.token >= 0
        post: __return__.input is None or __return__.input >= self.runner_rows(p, grant, is_decode)
        """
        return Budgets(grant, None)

    def refund(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> Budgets:
        """What a same-step preemption of a request granted ``grant`` gives back: exactly its
        charge, or nothing for an engine that never refunds.

        pre: plain(grant, p.draft_slots, p.decode_rows, p.block_size) and grant >= 1 and p.draft_slots >= 0
        pre: p.block_size >= 1
        pre: isinstance(is_decode, bool)
        post: __return__ == (self.charge(p, grant, is_decode) if self.refunds else Budgets(0, None))
        """
        return self.charge(p, grant, is_decode) if self.refunds else Budgets(0, None)

    def runner_rows(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> IntLike:
        """Rows the engine's model runner really needs for one scheduled request."""
        return grant + p.draft_slots

    def spend(self, b: Budgets, amount: Budgets, sign: int) -> Budgets:
        """b - amount (sign=-1) or b + amount (sign=+1), leaving an untracked input alone.

        pre: plain(b.token, b.input, amount.token, amount.input) and sign in (-1, 1)
        post: __return__.token == b.token + sign * amount.token
        post: (__return__.input is None) == (b.input is None)
        """
        inp = None if b.input is None else b.input + sign * (amount.input if amount.input is not None else 0)
        return Budgets(b.token + sign * amount.token, inp)
