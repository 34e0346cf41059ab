"""Correct copies of built-in policies and of an engine loop, with no change: they must pass."""
from tokenbudget.model import FastDeployLoop, VllmLoop
from tokenbudget.model.fastdeploy.policies import FastDeploySpecMethod
from tokenbudget.model.sglang.policies import Sglang
from tokenbudget.model.trtllm.policies import Trtllm
from tokenbudget.model.vllm.policies import VllmAdaptive


class VllmAdaptiveCopy(VllmAdaptive):
    name = "vllm-adaptive-copy"


class VllmLoopCopy(VllmAdaptive):
    name = "vllm-loop-copy"

    class loop(VllmLoop):  # noqa: N801 (the policy's ``loop`` attribute)
        pass


class FastDeploySpecMethodCopy(FastDeploySpecMethod):
    name = "fastdeploy-spec-method-copy"

    class loop(FastDeployLoop):  # noqa: N801
        pass


class SglangCopy(Sglang):
    name = "sglang-copy"


class TrtllmCopy(Trtllm):
    name = "trtllm-copy"


CORRECT_COPIES = ("copies:VllmAdaptiveCopy", "copies:VllmLoopCopy", "copies:FastDeploySpecMethodCopy",
                  "copies:SglangCopy", "copies:TrtllmCopy")  # module:class
