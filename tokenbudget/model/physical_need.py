"""What a step physically needs: the KV slots a scheduled request writes, the runner rows it occupies."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..spec import grant_rules
from ..spec.intlike import BoolLike, IntLike, ite
from . import methods
from .config import ConfigError
from .policy import BudgetPolicy

_PACKAGE = __name__.rpartition(".")[0] + "."


def builtin_class(cls: type) -> type:
    """The nearest class of ``cls``'s MRO that the model itself defines (``cls`` for a
    built-in one): a user's subclass overrides nothing that is asked of it."""
    return next(c for c in cls.__mro__ if c.__module__.startswith(_PACKAGE))


@dataclass(frozen=True)
class PhysicalNeed:
    """The physical counts of one config: its table, L, d and a decode's rows (IntLike)."""

    table: str  # the key of ``methods.TABLES`` the engine and version run
    version: Optional[str]  # the engine version (None: an engine modelled at one version)
    lookahead: IntLike  # L: KV slots the drafter writes past a request's target rows (not its reservation)
    draft_slots: IntLike  # d: drafter rows past the target rows of every scheduled request
    decode_rows: IntLike  # target rows of a decode where the engine runs them whatever it was granted
    decodes_run_decode_rows: bool

    def target_rows(self, grant: IntLike, is_decode: BoolLike) -> IntLike:
        """Target rows one scheduled request runs (and writes KV at)."""
        return ite(is_decode, self.decode_rows, grant) if self.decodes_run_decode_rows else grant

    def runner_rows(self, grant: IntLike, is_decode: BoolLike) -> IntLike:
        """Rows one scheduled request occupies on the runner: target rows + d."""
        return self.target_rows(grant, is_decode) + self.draft_slots

    def kv_slots(self, computed: IntLike, target_rows: IntLike, max_model_len: IntLike) -> IntLike:
        """KV slots a request running ``target_rows`` past ``computed`` writes, the drafter's L included."""
        return grant_rules.kv_slots_needed(computed, target_rows, self.lookahead, max_model_len)


def physical_need(policy: BudgetPolicy, cfg: Any) -> PhysicalNeed:
    """The need of ``cfg`` (a BudgetConfig, or the prover's view of one with one method and
    z3 numbers) under ``policy``'s engine and version. Raises ConfigError when the engine's
    table has no row for the method."""
    loop = builtin_class(policy.loop)
    version = BudgetPolicy.engine_version(policy, cfg)
    table = loop.method_table(version)
    method, k = cfg.method, cfg.num_speculative_tokens
    if method is None:
        return PhysicalNeed(table, version, 0, 0, 1, loop.decodes_run_decode_rows)
    if method not in methods.TABLES[table]:
        raise ConfigError(f"method {method!r} is not in the {table} method table of {loop.__name__}; set method to "
                          f"one of {', '.join(sorted(methods.TABLES[table]))}")
    writes_kv = methods.drafter(table, method) == methods.MODEL_DRAFTER
    return PhysicalNeed(
        table=table,
        version=version,
        lookahead=methods.drafter_writes(table, method, k) if writes_kv else 0,
        draft_slots=methods.draft_slots(table, method, k, cfg.parallel_drafting),
        decode_rows=methods.decode_rows(table, method, k),
        decodes_run_decode_rows=loop.decodes_run_decode_rows,
    )
