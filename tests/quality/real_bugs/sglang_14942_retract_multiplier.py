"""SGLang #14942 (fixed by PR #14939): spec v1's retraction loop re-checked the pool with
the default multiplier 1, not the speculative M = (1 + k) + k of the first check, so it
stopped retracting while each verify still needed 1 + k slots."""
from tokenbudget.model.sglang.policies import SglangV1RetractFixed


class Policy(SglangV1RetractFixed):
    name = "sglang-14942-retract-multiplier"

    def decode_fits(self, loop, reqs, retracting):
        m = 1 if retracting else self.multiplier(loop)
        return loop.available() >= self.pages_next_decode(loop, reqs) * m * loop.page
