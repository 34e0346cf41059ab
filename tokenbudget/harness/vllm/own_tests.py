"""vLLM's own scheduler tests, fetched and run offline: ``tests/`` of a release's sdist, the
Hugging Face ``config.json`` files they name (ours, ``hf_configs/``) in a local hub cache,
and the pytest command that runs them under the plugin with no network.

The sdist is taken from the simple index pip reads (PEP 691 JSON: its URL and sha256; ``pip
download --no-binary :all:`` would build vLLM's metadata, which installs its build
dependencies), checked, and only its ``tests/`` unpacked. Hugging Face is never contacted.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

HF_CONFIGS = Path(__file__).parent / "hf_configs"
# The files of tests/v1/core that build a Scheduler (the others test the KV cache manager alone).
SCHEDULER_TESTS = ("test_scheduler.py", "test_async_scheduler.py", "test_priority_preemption_bug.py",
                   "test_priority_scheduler_random.py", "test_deferred_block_free.py", "test_prefix_replay.py",
                   "test_swa_inflight_window_free.py", "test_worker_slot_overflow.py")
SIMPLE_JSON = {"Accept": "application/vnd.pypi.simple.v1+json"}  # PEP 691, what pip asks for
DEFAULT_INDEX = "https://pypi.org/simple"
TRITON = "triton==3.9.0"  # the newest on the index; its CUDA build: only importable is asked of it
TRITON_FOLDER = "triton"


def fetch_tests(version: str, dest: Path, index: str | None = None) -> int:
    """Unpack ``tests/`` of vLLM ``version``'s sdist into ``dest`` (``dest/tests/...``) from
    ``index`` (default: $PIP_INDEX_URL, else PyPI); the entries unpacked, 0 when ``dest``
    holds ``tests/v1/core`` already. Raises ValueError naming what is wrong (no such sdist,
    a sha256 that differs), OSError when the index cannot be read."""
    if (dest / "tests" / "v1" / "core").is_dir():
        return 0
    simple = index or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    request = urllib.request.Request(f"{simple.rstrip('/')}/vllm/", headers=SIMPLE_JSON)
    with urllib.request.urlopen(request, timeout=60) as page:
        files = json.load(page)["files"]
    sdist = next((f for f in files if f["filename"] == f"vllm-{version}.tar.gz"), None)
    if sdist is None:
        raise ValueError(f"{simple} has no sdist of vllm {version}; name a released version (0.32.0, 0.33.0, ...)")
    with urllib.request.urlopen(sdist["url"], timeout=600) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sdist["hashes"]["sha256"]:
        raise ValueError(f"{sdist['filename']}: its sha256 differs from the index's; fetch it again")
    top = f"vllm-{version}/"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        members = []
        for member in archive.getmembers():
            if member.name.startswith(top + "tests/") and (member.isfile() or member.isdir()):
                member.name = member.name[len(top):]
                members.append(member)
        archive.extractall(dest, members, filter="data")
    return len(members)


def hub_cache(home: Path) -> Path:
    """A Hugging Face hub cache under ``home`` holding each of our config.json files as its
    model's main revision (kept where it is there already); ``home``, for ``HF_HOME``."""
    revision = "0" * 40
    for config in HF_CONFIGS.glob("*/*/config.json"):
        repo = home / "hub" / f"models--{config.parent.parent.name}--{config.parent.name}"
        (repo / "snapshots" / revision).mkdir(parents=True, exist_ok=True)
        shutil.copy(config, repo / "snapshots" / revision / "config.json")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
    return home


def offline_env(home: Path) -> dict[str, str]:
    """The environment that makes vLLM's tests read ``hub_cache(home)`` and never the network."""
    return {"HF_HUB_OFFLINE": "1", "HF_HOME": str(home)}


def scheduler_test_files(folder: Path) -> list[str]:
    """The scheduler test files of ``folder/tests/v1/core`` this release has, relative to ``folder``."""
    return [f"tests/v1/core/{name}" for name in SCHEDULER_TESTS if (folder / "tests/v1/core" / name).is_file()]


def needs_triton(version: str) -> bool:
    """Whether vLLM ``version``'s CPU platform refuses to start here without Triton (an x86
    CPU, no CUDA device): its own tests then need Triton importable (SPEC.md §13.1)."""
    from .platform import cpu_platform_refuses

    if not cpu_platform_refuses(version, "CpuPlatform", has_triton=False):
        return False
    import torch

    return not torch.cuda.is_available()


def triton_importable() -> bool:
    """Whether this Python imports Triton already."""
    from importlib.util import find_spec

    return find_spec("triton") is not None


def triton_at_hand(dest: Path) -> bool:
    """Whether the tests in ``dest`` find Triton: importable here, or in ``dest/triton``."""
    return triton_importable() or (dest / TRITON_FOLDER / "triton").is_dir()


def fetch_triton(version: str, dest: Path) -> str | None:
    """Install Triton (no dependencies) into ``dest/triton`` when vLLM ``version``'s tests
    need it here and it is neither there nor importable; what was done, or None."""
    folder = dest / TRITON_FOLDER
    if not needs_triton(version) or triton_at_hand(dest):
        return None
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder),
                           TRITON], capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"pip could not install {TRITON} into {folder}: {done.stderr.strip().splitlines()[-1:]}")
    return f"{TRITON} installed into {folder} (vLLM {version}'s CPU platform needs Triton on x86)"


def platform_env(version: str, dest: Path, pythonpath: str = "") -> dict[str, str]:
    """What vLLM ``version``'s tests in ``dest`` need beyond ``offline_env`` to start on this
    machine, given the ``PYTHONPATH`` they would have: Triton's folder before it, and no CUDA
    device visible, which keeps Triton enabled with no active driver
    (vllm/triton_utils/importing.py:56-70, vLLM 0.34.0); nothing elsewhere."""
    if not needs_triton(version):
        return {}
    folder = dest / TRITON_FOLDER
    path = os.pathsep.join(p for p in (str(folder) if folder.is_dir() else "", pythonpath) if p)
    return {"CUDA_VISIBLE_DEVICES": "", **({"PYTHONPATH": path} if path else {})}


def pytest_command(folder: Path, version: str, mode: str = "strict") -> str:
    """The shell command that runs the release's scheduler tests in ``folder`` under the
    plugin, offline: their own empty ini and rootdir (a folder inside a checkout would take
    its pyproject's options)."""
    extra = {**offline_env(folder / "hf"), **platform_env(version, folder)}
    words = [f"{k}={shlex.quote(v)}" for k, v in extra.items() if k != "PYTHONPATH"]
    if "PYTHONPATH" in extra:  # before the caller's own, kept
        words.append(f"PYTHONPATH={shlex.quote(extra['PYTHONPATH'])}${{PYTHONPATH:+:$PYTHONPATH}}")
    env = " ".join(words)
    return (f"cd {shlex.quote(str(folder))} && {env} python -m pytest -p no:cacheprovider -c pytest.ini "
            f"--rootdir . --tokenbudget={mode} " + " ".join(scheduler_test_files(folder)))
