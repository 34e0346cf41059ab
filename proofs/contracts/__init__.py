"""CrossHair contracts: the PEP 316 conditions that ``crosshair check`` verifies.

The budget functions carry their contracts in their own docstrings (``model/policy.py``
and the policies); ``step.py`` states the reference scheduler's step. ``CHECKED`` lists what the
test suite hands to ``crosshair check``; ``examples/bugs_detected`` holds planted bugs the
same contracts catch.
"""

CHECKED = (
    "tokenbudget.model.vllm_policies.VllmAdaptive",
    "tokenbudget.model.vllm_policies.VllmStatic",
    "tokenbudget.model.fastdeploy_policies.FastDeployV0",
    "tokenbudget.model.fastdeploy_policies.FastDeployReserve",
    "tokenbudget.model.fastdeploy_policies.FastDeployReserveCherrypick",
    "tokenbudget.model.fastdeploy_policies.FastDeployDecodeCount",
    "tokenbudget.model.fastdeploy_policies.FastDeploySpecMethod",
    "tokenbudget.model.fastdeploy_policies.FastDeployMtpOnly",
    "tokenbudget.model.trtllm_policies.Trtllm",
    "tokenbudget.model.trtllm_policies.TrtllmOneModelUnreserved",
    "tokenbudget.proofs.contracts.step",
)
PLANTED = "tokenbudget.proofs.contracts.examples.bugs_detected.planted"
