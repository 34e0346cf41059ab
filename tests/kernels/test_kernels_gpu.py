"""The GPU checks of ``tokenbudget/kernels/gpu_check.py``, as tests: they run only where CUDA is."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

from tokenbudget.kernels.gpu_check import CHECKS, Check

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_gpu_check(check: Callable[[], Check]) -> None:
    result = check()
    assert result.ok, result.detail
