"""Fetch vLLM's own test suite (``tests/`` of the release's sdist) into a folder, once.

usage: python3 .ci/vllm_own_tests.py VERSION DEST

The sdist is taken from the simple index pip reads (PEP 691 JSON: its URL and
sha256; ``pip download --no-binary :all:`` would build vLLM's metadata, which installs its
build dependencies), checked, and only its ``tests/`` unpacked into DEST (DEST/tests/...). A
DEST that already holds ``tests/v1/core`` is left as it is.
"""
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

from pip._internal.models.index import PyPI

version, dest = sys.argv[1], Path(sys.argv[2])
if (dest / "tests" / "v1" / "core").is_dir():
    sys.exit(0)
SIMPLE_JSON = {"Accept": "application/vnd.pypi.simple.v1+json"}  # PEP 691, what pip asks for
# the index pip itself reads: $PIP_INDEX_URL, else pip's default
simple = os.environ.get("PIP_INDEX_URL") or PyPI.simple_url
index = urllib.request.Request(f"{simple.rstrip('/')}/vllm/", headers=SIMPLE_JSON)
with urllib.request.urlopen(index, timeout=60) as page:
    sdist = next(f for f in json.load(page)["files"] if f["filename"] == f"vllm-{version}.tar.gz")
with urllib.request.urlopen(sdist["url"], timeout=600) as response:
    data = response.read()
if hashlib.sha256(data).hexdigest() != sdist["hashes"]["sha256"]:
    sys.exit(f"{sdist['filename']}: sha256 differs from PyPI's")
prefix = f"vllm-{version}/tests/"
with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
    members = []
    for member in archive.getmembers():
        if member.name.startswith(prefix) and (member.isfile() or member.isdir()):
            member.name = member.name[len(f"vllm-{version}/"):]
            members.append(member)
    archive.extractall(dest, members, filter="data")
print(f"{sdist['filename']}: {len(members)} entries of tests/ unpacked into {dest}")
