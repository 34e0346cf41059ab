"""Where Hypothesis keeps the examples that failed, so that every later run replays them
first (``Phase.reuse``): a folder, a Redis server shared by many machines, or none.

A database is named by one string, as ``--database`` takes it: ``none``, a folder path,
or ``redis://HOST:PORT/N``. The default is the per-user cache folder
(``$XDG_CACHE_HOME/tokenbudget/examples``, else ``~/.cache/tokenbudget/examples``), never
the current directory: a relative ``XDG_CACHE_HOME`` is ignored, as the XDG base directory
spec says; ``TOKENBUDGET_DATABASE`` overrides it. A folder is checked when the database
opens, before any example is run (``spec.user_paths.writable_folder``), so no example is
lost to a folder that cannot take it. Only Hypothesis's own databases are used.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..spec.user_paths import PathRefused, writable_folder

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

NONE = "none"
ENVIRONMENT = "TOKENBUDGET_DATABASE"
REDIS_TIMEOUT = 3.0  # seconds to connect to a Redis server before giving up


class DatabaseError(ValueError):
    """A database that cannot be used, said in one line."""


def cache_folder() -> Path:
    """tokenbudget's per-user cache folder: ``$XDG_CACHE_HOME/tokenbudget`` when that is an
    absolute path, else ``~/.cache/tokenbudget``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "tokenbudget"


def default_database() -> str:
    """``$TOKENBUDGET_DATABASE`` when set, else ``examples`` in the per-user cache folder."""
    return os.environ.get(ENVIRONMENT) or str(cache_folder() / "examples")


def source_of(where: str) -> str:
    """Where the database name came from, as an error line names it."""
    if where == os.environ.get(ENVIRONMENT):
        return f"${ENVIRONMENT}"
    if where == str(cache_folder() / "examples"):
        return "the default database (under $XDG_CACHE_HOME or ~/.cache)"
    return "--database"


def is_redis(where: str) -> bool:
    return where.startswith("redis://")


def open_database(where: str) -> ExampleDatabase | None:
    """The database ``where`` names (None for ``none``). A folder is created when missing and
    must take a new file; a Redis server is asked for a ping first. DatabaseError, naming
    where the name came from, when the folder cannot be used, the server cannot be reached
    or the name is malformed."""
    if where == NONE:
        return None
    source = source_of(where)
    if not where or ("://" in where and not is_redis(where)):
        raise DatabaseError(f"{source} {where!r}: expected a folder, redis://HOST:PORT/N or none")
    from hypothesis.database import DirectoryBasedExampleDatabase  # Hypothesis loads only when a database opens
    if not is_redis(where):
        try:
            writable_folder(where, source)
        except PathRefused as e:
            raise DatabaseError(str(e)) from None
        return DirectoryBasedExampleDatabase(where)
    from hypothesis.extra.redis import RedisExampleDatabase
    from redis import Redis
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisError
    from redis.retry import Retry

    url = urlsplit(where)
    try:
        port, db = url.port, url.path.strip("/") or "0"
    except ValueError:
        port, db = None, ""
    if not url.hostname or port is None or not db.isdigit():
        raise DatabaseError(f"{source} {where}: expected redis://HOST:PORT/N")
    address = dict(host=url.hostname, port=port, db=int(db), password=url.password,
                   socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT)
    try:
        Redis(**address, retry=Retry(NoBackoff(), 0)).ping()  # asked once: the database's own client retries
    except RedisError as e:
        raise DatabaseError(f"{source} {where}: cannot reach Redis: {e}") from None
    return RedisExampleDatabase(Redis(**address))
