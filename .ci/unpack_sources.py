"""Unpack a wheel's Python sources, JSON/Jinja data and metadata into a folder, leaving out its
compiled libraries, C/CUDA headers and bundled executables. For vLLM 0.33.0, whose scheduler needs
only the Python: 61 MB instead of the whole wheel's 878 MB. (SGLang looks for its kernel sources at
import, so it is unpacked whole.)

usage: python3 .ci/unpack_sources.py WHEEL DEST
"""
import sys
import zipfile

KEPT_SUFFIXES = (".py", ".json", ".jinja", ".txt", ".typed")

wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    members = [name for name in archive.namelist()
               if name.endswith(KEPT_SUFFIXES) or ".dist-info/" in name]
    archive.extractall(dest, members)
print(f"{wheel}: {len(members)} files unpacked into {dest}")
