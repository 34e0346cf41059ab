"""Fetch vLLM's own test suite (``tests/`` of the release's sdist) into a folder, once.

usage: python3 .ci/vllm_own_tests.py VERSION DEST

What ``tokenbudget engine-tests vllm VERSION DEST`` fetches (``tokenbudget.harness.vllm.own_tests``):
only the sdist's ``tests/``, from the simple index pip reads, its sha256 checked. A DEST that
already holds ``tests/v1/core`` is left as it is.
"""
import sys
from pathlib import Path

from tokenbudget.harness.vllm.own_tests import fetch_tests

version, dest = sys.argv[1], Path(sys.argv[2])
try:
    entries = fetch_tests(version, dest)
except ValueError as e:
    sys.exit(str(e))
if entries:
    print(f"vllm-{version}.tar.gz: {entries} entries of tests/ unpacked into {dest}")
