"""SGLang #9982 (fixed by PR #9989): the retraction loop asked the pool for tokens, n * (20 + k
+ 1 + k) (``retract_decode_steps``, the drafts' steps and the verify's draft tokens), not pages,
so with a page larger than 21 + 2k it stopped retracting while each remaining decode still
needed a whole new page, and the decode ran out of KV. The last request was kept (the abort
came later)."""
from tokenbudget.model.sglang.loop import RETRACT_DECODE_STEPS
from tokenbudget.model.sglang.policies import Sglang


class Policy(Sglang):
    name = "sglang-9989-retract-tokens"
    aborts_last = False

    def decode_fits(self, loop, reqs, retracting):
        if not retracting:
            return super().decode_fits(loop, reqs, retracting)
        return loop.available() >= len(reqs) * (RETRACT_DECODE_STEPS + loop.k + 1 + loop.k)
