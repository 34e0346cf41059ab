"""SGLang before PR #14180: with page_size > 1 the spec-v1 decode check counted a new page
only for a request exactly at a page boundary, (seqlen - 1) % page == 0, though a verify
of 1 + k tokens crosses into a new page from any of the last 1 + k slots of a page."""
from tokenbudget.model.sglang.policies import SglangV1RetractFixed


class Policy(SglangV1RetractFixed):
    name = "sglang-14180-page-boundary"

    def pages_next_decode(self, loop, reqs):
        if loop.page == 1:
            return len(reqs)
        return sum(1 for r in reqs if (r.num_tokens - 1) % loop.page == 0)
