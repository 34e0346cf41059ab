"""FastDeploy before PR #7438: the step's token budget is all of max_num_batched_tokens and a
decode is charged its 1 token, though it runs 1 + k rows; step tokens kept exceeding B
until Paddle ran out of memory (the seed report)."""
from tokenbudget.model import Budgets
from tokenbudget.model.fastdeploy.policies import FastDeploySpecMethod


class Policy(FastDeploySpecMethod):
    name = "fastdeploy-before-7438"

    def initial_budgets(self, p, num_decoding):
        return Budgets(p.max_num_batched_tokens, None)

    def charge(self, p, grant, is_decode):
        return Budgets(grant, None)
