"""Where SGLang is looked for: ``--engine-path DIR``, else ``$TOKENBUDGET_SGLANG_PATH``, else
``.engines/sglang-0.5.23`` in the repository root (the release the harness drives)."""
from __future__ import annotations

from pathlib import Path

RELEASE = "0.5.23"
PATH_ENV = "TOKENBUDGET_SGLANG_PATH"
DEFAULT_PATH = Path(__file__).resolve().parents[3] / ".engines" / f"sglang-{RELEASE}"
