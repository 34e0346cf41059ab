"""``tensorrt_llm.logger.logger`` (tensorrt_llm/logger.py, a wrapper of the C++ logger): a logger
that drops what scheduler.py logs at debug level."""
from __future__ import annotations

import logging

logger = logging.getLogger("tensorrt_llm")
logger.addHandler(logging.NullHandler())
logger.propagate = False
