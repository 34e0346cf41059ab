"""A user policy whose module is slow to import, as an engine's is on a busy machine:
``TOKENBUDGET_TEST_IMPORT_SLEEP`` seconds (none when unset), in fuzz's worker processes only
when ``TOKENBUDGET_TEST_IMPORT_SLEEP_IN_WORKERS`` is set."""
import multiprocessing
import os
import time

from tokenbudget.model.vllm.policies import VllmAdaptive

_SLEEP = float(os.environ.get("TOKENBUDGET_TEST_IMPORT_SLEEP") or 0)
if _SLEEP and (not os.environ.get("TOKENBUDGET_TEST_IMPORT_SLEEP_IN_WORKERS")
               or multiprocessing.parent_process() is not None):
    time.sleep(_SLEEP)


class SlowToImport(VllmAdaptive):
    name = "slow-to-import"
    description = "vllm-adaptive, from a module slow to import"
