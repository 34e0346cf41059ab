"""``tokenbudget engine-tests vllm VERSION DIR``: fetch vLLM's own scheduler tests and what
they need offline, and print the command that runs them under the plugin.

DIR gets ``tests/`` of the release's sdist (from the index pip reads; never Hugging Face),
``hf/`` (a hub cache with the model configs the tests name) and ``pytest.ini`` (empty: the
tests' own options). Exit 0 with the command on stdout; 2 when the release or the index
cannot be had (one line).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .args import folder
from .console import Console
from .exits import OK
from .harness.vllm.own_tests import fetch_tests, hub_cache, pytest_command
from .model.replay import BadInput
from .spec.user_paths import writable_folder

HELP = "fetch an engine's own scheduler tests and their offline configs; print how to run them under the plugin"
DESCRIPTION = ("Fetch vLLM's own scheduler tests (tests/ of the release's sdist, from the index pip reads) into "
               "DIR with the Hugging Face configs they name (a local hub cache: nothing is downloaded from Hugging "
               "Face), and print the pytest command that runs them offline under --tokenbudget=strict.")
ENGINES = ("vllm",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("engine", choices=ENGINES, help="the engine whose tests to fetch")
    parser.add_argument("version", metavar="VERSION", help="the release, as its sdist names it (0.33.0)")
    parser.add_argument("dir", type=folder, metavar="DIR", help="where the tests go (created when missing)")


def run(args: argparse.Namespace, console: Console) -> int:
    dest = writable_folder(args.dir, "DIR")
    try:
        fetched = fetch_tests(args.version, dest)
    except ValueError as e:
        raise BadInput(str(e)) from None
    except OSError as e:
        raise BadInput(f"cannot fetch vllm {args.version}'s sdist ({e}); check the network or PIP_INDEX_URL") from None
    hub_cache(dest / "hf")
    if not (dest / "pytest.ini").exists():
        (dest / "pytest.ini").write_text("[pytest]\n")
    console.progress(f"{fetched} entries of tests/ unpacked into {dest}" if fetched else f"{dest}/tests kept")
    console.text(pytest_command(dest.resolve()))
    return OK
