"""The runner's tests run torch on one intra-op thread, as ``tokenbudget replay --target
runner --device cpu`` does: the models are tiny, and a second thread on a busy machine
makes every op wait for it."""
from __future__ import annotations

from typing import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
