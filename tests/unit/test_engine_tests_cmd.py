"""``tokenbudget engine-tests vllm VERSION DIR``: the sdist's tests/ from the index pip reads
(a local one here: no network), the offline hub cache, and the command that runs them."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from contextlib import redirect_stderr, redirect_stdout
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from tokenbudget.cli import main


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # the server's log is not the command's stderr
        pass


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A simple index on a loopback port with one sdist, vllm-9.9.9, whose tests/ holds a scheduler test."""
    served = tmp_path / "served"
    (served / "simple" / "vllm").mkdir(parents=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (("vllm-9.9.9/tests/v1/core/test_scheduler.py", "def test_x():\n    pass\n"),
                           ("vllm-9.9.9/vllm/__init__.py", "")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    (served / "vllm-9.9.9.tar.gz").write_bytes(buffer.getvalue())
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(served)))
    base = f"http://127.0.0.1:{server.server_port}"
    (served / "simple" / "vllm" / "index.html").write_text(json.dumps({"files": [
        {"filename": "vllm-9.9.9.tar.gz", "url": f"{base}/vllm-9.9.9.tar.gz",
         "hashes": {"sha256": hashlib.sha256(buffer.getvalue()).hexdigest()}}]}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PIP_INDEX_URL", f"{base}/simple")
    yield base
    server.shutdown()
    server.server_close()


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_tests_and_their_offline_configs_are_fetched_and_the_command_printed(index: str, tmp_path: Path) -> None:
    dest = tmp_path / "own"
    code, out, _ = run("engine-tests", "vllm", "9.9.9", str(dest), "--quiet")
    assert code == 0
    assert (dest / "tests/v1/core/test_scheduler.py").is_file() and not (dest / "vllm").exists()
    assert (dest / "hf/hub/models--facebook--opt-125m/snapshots").is_dir() and (dest / "pytest.ini").is_file()
    command = out.strip()
    assert "HF_HUB_OFFLINE=1" in command and f"HF_HOME={dest.resolve() / 'hf'}" in command
    assert command.endswith("--tokenbudget=strict tests/v1/core/test_scheduler.py")


def test_a_release_the_index_lacks_is_one_line(index: str, tmp_path: Path) -> None:
    code, out, err = run("engine-tests", "vllm", "0.0.1", str(tmp_path / "own"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "no sdist of vllm 0.0.1" in err
