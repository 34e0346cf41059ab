"""Where a real engine's code is loaded from: the folder given, else the engine's environment
variable, else its default (every engine package asks the same way)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, TypeVar

Default = TypeVar("Default", Path, None)


def chosen_folder(path: Optional[Path], env: str, default: Default) -> Path | Default:
    """``path``, else ``$env``, else ``default``; a given one resolved (``~`` and links)."""
    if path is not None:
        return path.expanduser().resolve()
    value = os.environ.get(env)
    return Path(value).expanduser().resolve() if value else default
