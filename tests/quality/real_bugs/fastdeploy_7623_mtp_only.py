"""The first revision of FastDeploy PR #7623: reserve k + 1 rows per decode only for method
mtp. An ngram decode still runs 1 + k rows but reserves 1."""
from tokenbudget.model import ite
from tokenbudget.model.fastdeploy.policies import FastDeploySpecMethod


class Policy(FastDeploySpecMethod):
    name = "fastdeploy-7623-mtp-only"

    def tokens_per_seq(self, p):
        return ite(p.method == "mtp", p.num_speculative_tokens + 1, 1)
