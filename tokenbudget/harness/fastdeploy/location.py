"""Where FastDeploy is looked for: ``--engine-path DIR``, else ``$TOKENBUDGET_FASTDEPLOY_PATH``
(a folder holding its ``fastdeploy/`` package); it has no default folder."""
from __future__ import annotations

PATH_ENV = "TOKENBUDGET_FASTDEPLOY_PATH"
