"""``tokenbudget engine-tests ENGINE VERSION DIR``: fetch an engine's own scheduler tests and
what they need offline (for vLLM: ``tests/`` of the release's sdist from the index pip reads,
a hub cache of the model configs they name, never Hugging Face), and print the command that
runs them under the plugin. Exit 0 with the command on stdout; 2 when the release or the
index cannot be had (one line).
"""
from __future__ import annotations

import argparse

from .args import folder
from .console import Console
from .exits import OK
from .harness import registry
from .harness.engine_descriptor import OWN_TESTS
from .model.replay import BadInput
from .spec.user_paths import writable_folder

HELP = "fetch an engine's own scheduler tests and their offline configs; print how to run them under the plugin"
DESCRIPTION = ("Fetch an engine's own scheduler tests (from the release's source distribution on the index pip "
               "reads) into DIR with the model configs they name (a local cache: nothing is downloaded from Hugging "
               "Face), and print the pytest command that runs them offline under --tokenbudget=strict.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("engine", choices=registry.names(OWN_TESTS), help="the engine whose tests to fetch")
    parser.add_argument("version", metavar="VERSION", help="the release, as its source distribution names it")
    parser.add_argument("dir", type=folder, metavar="DIR", help="where the tests go (created when missing)")


def run(args: argparse.Namespace, console: Console) -> int:
    dest = writable_folder(args.dir, "DIR")
    try:
        done, command = registry.engine(args.engine).fetch_own_tests(args.version, dest)
    except (ValueError, OSError) as e:
        raise BadInput(str(e)) from None
    console.progress(done)
    console.text(command)
    return OK
