"""A user policy that prints, as it loads and in its methods: ``--json`` must keep stdout to
the one document whatever it prints."""
from __future__ import annotations

from tokenbudget.model.vllm.policies import VllmAdaptive

print("printed while the policy module loads")


class Chatty(VllmAdaptive):
    """vllm-adaptive, printing a line on every grant."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        print(f"granting for a demand of {demand}")
        return super().grant(p, demand, b)
