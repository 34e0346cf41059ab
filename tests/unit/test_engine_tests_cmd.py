"""``tokenbudget engine-tests vllm VERSION DIR``: the sdist's tests/ from the index pip reads
(a local one here: no network), the offline hub cache, and the command that runs them."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from tokenbudget.cli import main
from tokenbudget.harness.vllm import own_tests


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
    wheel = "triton-3.9.0-py3-none-any.whl"
    with zipfile.ZipFile(served / wheel, "w") as archive:
        archive.writestr("triton/__init__.py", "")
        archive.writestr("triton-3.9.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: triton\nVersion: 3.9.0\n")
        archive.writestr("triton-3.9.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr("triton-3.9.0.dist-info/RECORD", "")
    (served / "simple" / "triton").mkdir()
    (served / "simple" / "triton" / "index.html").write_text(f'<a href="{base}/{wheel}">{wheel}</a>')
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


def test_the_tests_and_their_offline_configs_are_fetched_and_the_command_printed(
        index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(own_tests, "needs_triton", lambda version: False)  # a CPU platform that starts without it
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


def test_where_the_cpu_platform_needs_triton_its_wheel_is_installed_beside_the_tests(
        index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(own_tests, "needs_triton", lambda version: True)  # vLLM >= 0.34 on an x86 CPU, no CUDA
    monkeypatch.setattr(own_tests, "triton_importable", lambda: False)
    dest = tmp_path / "own"
    code, out, err = run("engine-tests", "vllm", "9.9.9", str(dest))
    assert code == 0, err
    assert (dest / "triton/triton/__init__.py").is_file()
    triton = dest.resolve() / "triton"
    assert f"CUDA_VISIBLE_DEVICES='' PYTHONPATH={triton}${{PYTHONPATH:+:$PYTHONPATH}} python -m pytest" in out
