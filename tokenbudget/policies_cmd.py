"""``tokenbudget policies``: the built-in budget policies, one row each."""
from __future__ import annotations

import argparse

from . import render
from .args import add_json
from .console import Console
from .exits import OK
from .model import builtin_policies

HELP = "list the built-in budget policies"
DESCRIPTION = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    rows = [{"name": name, "engine": cls.engine, "version": cls.version, "models": ", ".join(cls.versions) or "-",
             "description": cls.description}
            for name, cls in builtin_policies().items()]
    if args.json:
        console.json({"policies": rows})
    else:
        console.text(render.policies(rows))
    return OK
