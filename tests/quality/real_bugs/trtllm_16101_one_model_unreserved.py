"""TensorRT-LLM before PR #16101: one-model MTP / Eagle3 attached no placeholder drafts,
so the micro-batch scheduler charged a generation request 1 token while the forward ran
1 + k rows, and chunked prefill sized context chunks into the rows it did not charge."""
from tokenbudget.model import ite
from tokenbudget.model.trtllm.policies import Trtllm


class Policy(Trtllm):
    name = "trtllm-16101-one-model-unreserved"

    def scheduled_drafts(self, p):
        return ite(p.one_model, 0, super().scheduled_drafts(p))
