"""A Redis server for the tests: the one CI started (``TOKENBUDGET_TEST_REDIS``), else one
started here from ``redis-server`` on a free loopback port, else none (the tests skip)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from typing import Iterator

ENVIRONMENT = "TOKENBUDGET_TEST_REDIS"


def _answers(url: str) -> bool:
    from redis import Redis
    from redis.exceptions import RedisError

    try:
        return bool(Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server() -> Iterator[str | None]:
    """The URL of a Redis database to use, emptied first; None when there is no server
    (the reason then is in ``why_none``)."""
    from redis import Redis

    url = os.environ.get(ENVIRONMENT)
    server = None
    if not url and shutil.which("redis-server"):
        port = _free_port()
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        for _ in range(100):
            if _answers(url) or server.poll() is not None:
                break
            time.sleep(0.1)
    try:
        if url and _answers(url):
            Redis.from_url(url).flushdb()
            yield url
        else:
            yield None
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)


WHY_NONE = (f"no Redis server: set {ENVIRONMENT}=redis://127.0.0.1:PORT/N (.ci/run does) or install "
            "redis-server (apt-get install redis-server)")
