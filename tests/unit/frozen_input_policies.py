"""User policies that write an input the model hands them, each the way a user might; the
line of each write ends with ``# writes``, so a test finds its file:line."""
from __future__ import annotations

from tokenbudget.model.sglang.policies import SglangV1Retract
from tokenbudget.model.vllm.policies import VllmAdaptive


class ZeroDraftSlots(VllmAdaptive):
    """Frees the draft slots inside ``grant``: the rows would read 20/20 where 26 run."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        object.__setattr__(p, "draft_slots", 0)  # writes
        return super().grant(p, demand, b)


class SetsDraftSlots(VllmAdaptive):
    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        p.draft_slots = 0  # writes
        return super().grant(p, demand, b)


class WritesVarsOfParams(VllmAdaptive):
    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        vars(p)["draft_slots"] = 0  # writes
        return super().grant(p, demand, b)


class DeletesBudget(VllmAdaptive):
    def may_schedule(self, p, b):  # type: ignore[no-untyped-def]
        object.__delattr__(b, "input")  # writes
        return super().may_schedule(p, b)


class RaisesTokenBudget(VllmAdaptive):
    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        object.__setattr__(b, "token", 10**6)  # writes
        return super().grant(p, demand, b)


class WidensConfig(VllmAdaptive):
    def validate(self, cfg):  # type: ignore[no-untyped-def]
        object.__setattr__(cfg, "max_num_batched_tokens", 10**6)  # writes
        super().validate(cfg)


class ResetsRatio(SglangV1Retract):
    def decode_fits(self, loop, reqs, retracting):  # type: ignore[no-untyped-def]
        loop.new_token_ratio = 0.0  # writes
        return super().decode_fits(loop, reqs, retracting)


class RewindsRequest(SglangV1Retract):
    def decode_target(self, loop, req):  # type: ignore[no-untyped-def]
        req.num_computed_tokens = 0  # writes
        return super().decode_target(loop, req)


class PopsBatch(SglangV1Retract):
    def decode_fits(self, loop, reqs, retracting):  # type: ignore[no-untyped-def]
        reqs.pop()  # writes
        return super().decode_fits(loop, reqs, retracting)


class CountsItsCalls(VllmAdaptive):
    """Keeps state of its own on self: the user's business, judged as vllm-adaptive."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        self.calls = getattr(self, "calls", 0) + 1
        return super().grant(p, demand, b)


class WritesItsOwnParams(VllmAdaptive):
    """Keeps the params it built and rewrites them later: the loop holds a read-only copy."""

    def params(self, cfg):  # type: ignore[no-untyped-def]
        self.built = super().params(cfg)
        return self.built

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        object.__setattr__(self.built, "draft_slots", 0)
        return super().grant(p, demand, b)


class OrdersItsOwnWay(SglangV1Retract):
    """Reads the requests it is handed and returns them in a new list: allowed."""

    def retraction_order(self, batch):  # type: ignore[no-untyped-def]
        return sorted(batch, key=lambda r: (r.num_output_tokens, r.num_prompt_tokens))
