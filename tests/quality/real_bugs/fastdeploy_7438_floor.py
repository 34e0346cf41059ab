"""FastDeploy PR #7438: reserve S * (k + 1) rows up front, but floor the budget at
min(B, 512) "to avoid negative token_budget": with S * (k + 1) near B the floor hands out
rows that were reserved for decodes."""
from tokenbudget.model import Budgets, max_, min_
from tokenbudget.model.fastdeploy.policies import FastDeploySpecMethod


class Policy(FastDeploySpecMethod):
    name = "fastdeploy-7438-floor"

    def initial_budgets(self, p, num_decoding):
        reserved = p.max_num_batched_tokens - p.max_num_seqs * (p.num_speculative_tokens + 1)
        return Budgets(max_(reserved, min_(p.max_num_batched_tokens, 512)), None)

    def charge(self, p, grant, is_decode):
        return Budgets(grant, None)
