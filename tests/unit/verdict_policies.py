"""User policies for the verdict tests (``--policy verdict_policies:Name`` with this folder on the path)."""
from __future__ import annotations

from tokenbudget.model import BudgetParams, Budgets, IntLike, VllmLoop, ite
from tokenbudget.model.fastdeploy.policies import FastDeploySpecMethod, FastDeployV0
from tokenbudget.model.vllm.policies import VllmAdaptive


class CopyAdaptive(VllmAdaptive):
    """vllm-adaptive, unchanged."""


class CopyV0(FastDeployV0):
    """fastdeploy-v0, unchanged: its row overflow is the copy's own."""


class CopySpecMethod(FastDeploySpecMethod):
    """fastdeploy-spec-method, unchanged."""


class ThrottledPrefill(VllmAdaptive):
    """Charges a prefill chunk twice to the token budget (two passes charged to one budget)."""

    def charge(self, p: BudgetParams, grant: IntLike, is_decode: bool) -> Budgets:
        base = super().charge(p, grant, is_decode)
        return Budgets(ite(is_decode, base.token, 2 * base.token), base.input)


class NoDraftsLoop(VllmLoop):
    drafts_in_grant = False


class PaddedWithoutDrafts(VllmAdaptive):
    """Runs a loop that pads admissions but does not count drafts in the grant."""

    loop = NoDraftsLoop


class MissingFlagLoop(VllmLoop):
    pads_short_admissions = None  # type: ignore[assignment]


class MissingFlag(VllmAdaptive):
    loop = MissingFlagLoop


class CrashingLoop(VllmLoop):
    """The model raises in its output update once a request decodes."""

    def update_from_output(self, record, accepted=None):  # type: ignore[no-untyped-def]
        if any(not r.is_prefill_chunk for r in self.running):
            raise RuntimeError("planted crash in the output update")
        return super().update_from_output(record, accepted)


class Crashing(VllmAdaptive):
    loop = CrashingLoop


class StallsSingleTokens(VllmAdaptive):
    """Grants nothing to a request that asks for one token: decodes without drafts never finish."""

    def grant(self, p: BudgetParams, demand: IntLike, b: Budgets) -> IntLike:
        return ite(demand > 1, super().grant(p, demand, b), 0)


def branches_in_python(value):  # type: ignore[no-untyped-def]
    """A helper of a loop variant that branches with a Python ``if``: a Z3Exception on a z3 term."""
    if value > 0:
        return value
    return 0
