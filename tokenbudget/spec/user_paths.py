"""Paths a user hands the tool, checked before any work is done with them.

A folder the tool writes into (a corpus, traces, a database, a campaign's output) must be a
folder, or one that can be created, and must take a new file; a file it reads (a trace) must
be a regular file. The system's own trees (/proc, /sys, /dev) are neither. Each refusal is a
``PathRefused``: one line naming the option, the path, the verb that fails and the fix.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

SYSTEM_TREES = ("/proc", "/sys", "/dev")


class PathRefused(ValueError):
    """A path the tool cannot use as the user meant: ``str()`` is one line, ``shown`` (where the
    path came from, and the path) then ``problem``, which ends with the fix."""

    def __init__(self, shown: str, problem: str) -> None:
        super().__init__(f"{shown}: {problem}")
        self.shown, self.problem = shown, problem


def system_tree(path: str | os.PathLike[str]) -> str | None:
    """The system tree (/proc, /sys, /dev) the real path lies in, or None."""
    real = os.path.realpath(path)
    return next((tree for tree in SYSTEM_TREES if real == tree or real.startswith(tree + "/")), None)


def kind_of(mode: int) -> str:
    """What a file of this stat mode is, in a few words."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a file"


def writable_folder(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a folder that takes new files, created (with its parents) when missing.
    ``what`` names where the path came from (``--corpus``, ``$TOKENBUDGET_DATABASE``)."""
    shown = f"{what} {os.fspath(path) or repr('')}"
    if not os.fspath(path):
        raise PathRefused(shown, "expected a folder, got an empty path; name one (. for the current folder)")
    tree = system_tree(path)
    if tree is not None:
        raise PathRefused(shown, f"cannot write under {tree}, which holds the system's own files; give a folder "
                                 "of your own")
    folder = Path(path)
    try:
        mode = folder.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PathRefused(shown, f"cannot create it ({e.strerror}); give a folder you can write") from None
        mode = folder.stat().st_mode
    except OSError as e:
        raise PathRefused(shown, f"cannot look at it ({e.strerror}); give a folder you can write") from None
    if not stat.S_ISDIR(mode):
        raise PathRefused(shown, f"cannot write there: it is {kind_of(mode)}, not a folder; give a folder, new or "
                                 "existing")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise PathRefused(shown, f"cannot write into it ({e.strerror}); give a folder you can write") from None
    return folder


def readable_file(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, before it is opened, a path that is not a regular file: a FIFO would block the
    reader for ever, a device or a /proc file is not the user's data. ``what`` names the
    file expected (``a trace file``)."""
    shown = os.fspath(path)
    tree = system_tree(path)
    if tree is not None:
        raise PathRefused(shown, f"a file under {tree} is the system's, not {what}; give {what}")
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise PathRefused(shown, f"cannot read it ({e.strerror}); give {what}") from None
    if not stat.S_ISREG(mode):
        raise PathRefused(shown, f"it is {kind_of(mode)}, not {what}; give {what}")
