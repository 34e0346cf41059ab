"""The ``tokenbudget`` command: a parser built from the table of commands.

Each command is a module ``<name>_cmd`` with ``HELP``, ``DESCRIPTION``,
``add_arguments(parser)`` and ``run(args, console) -> exit status``. Exit status: 0 every
verdict is as expected (for replay: and nothing was violated); 1 a violation or an
unexpected verdict; 2 bad usage or bad input, with one line ``tokenbudget: error: ...`` on
stderr and never a traceback. ``--json`` prints exactly one JSON document on stdout and
nothing else there. Progress goes to stderr: a live line on a terminal, elsewhere a line
every few seconds of a long run; ``--quiet`` turns it off. Ctrl-C ends a command with
what it finished and exit status 130.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator, NoReturn

from .args import UsageError
from .console import Console
from .engine_path import run_in_child
from .exits import BAD_INPUT, INTERRUPTED, OK
from .fuzz.database import DatabaseError, cache_folder
from .render import clean
from .model import ConfigError, PolicyError, user_code
from .model.policy_guard import symbolic_branch
from .model.replay import BadInput
from .spec import interrupts
from .spec.target import TargetUnavailable
from .spec.trace import TraceError
from .spec.user_paths import PathRefused

# name -> its module; a run imports only the module of the command it runs (Hypothesis and
# the prover load with the commands that use them), the help imports them all
COMMANDS = {"policies": "policies_cmd", "replay": "replay_cmd", "check": "check_cmd", "prove": "prove_cmd",
            "conform": "conform_cmd", "fuzz": "fuzz_cmd", "campaign": "campaign_cmd", "export": "export_cmd",
            "whatif": "whatif_cmd", "engine-tests": "engine_tests_cmd"}
# PolicyError reaches here only from prove, whose policy calls run on z3 terms: the policy cannot be used
BAD_INPUT_ERRORS = (UsageError, TraceError, BadInput, ConfigError, TargetUnavailable, DatabaseError, PolicyError,
                    PathRefused)
MAX_ERROR = 1000  # characters of an error line


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{COMMANDS[name]}")


def _z3_errors() -> tuple[type[BaseException], ...]:
    """z3's exception class once a command has loaded z3 (none can be raised before)."""
    z3 = sys.modules.get("z3")
    return (z3.Z3Exception,) if z3 is not None else ()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; when ``argv`` names a command first, of that one alone."""
    parser = _Parser(prog="tokenbudget", description="Token-budget invariants of speculative-decoding schedulers.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = argv[0] if argv and argv[0] in COMMANDS else None
    for name in COMMANDS if named is None else [named]:
        command = command_module(name)
        p = sub.add_parser(name, help=command.HELP, description=command.DESCRIPTION)
        command.add_arguments(p)
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")
        p.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status. What Hypothesis keeps besides the
    example database goes to the per-user cache folder, never the current directory. A
    failure while a Ctrl-C is noted is the Ctrl-C's (``spec.interrupts``)."""
    console = Console()
    with interrupts.handled():
        try:
            return _main(sys.argv[1:] if argv is None else list(argv), console)
        except Exception:
            if interrupts.requested():
                return _interrupted(console)
            raise


def _main(argv: list[str], console: Console) -> int:
    storage = None
    if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
        storage = os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(cache_folder() / "hypothesis")
    try:
        parser = build_parser(argv)
        if storage is not None and "hypothesis.configuration" in sys.modules:  # loaded by the command, unused yet
            sys.modules["hypothesis.configuration"].set_hypothesis_home_dir(storage)
        args = parser.parse_args(argv)
        console.quiet = args.quiet
        child = run_in_child(args, argv)  # the engine asked for runs in a child process of its own
        if child is not None:
            return child
        with policy_timeout(getattr(args, "policy_timeout", None)):
            if getattr(args, "json", False):
                with console.json_only():
                    return args.run(args, console)
            return args.run(args, console)
    except BAD_INPUT_ERRORS as e:
        return _error(console, str(e))
    except _z3_errors() as e:  # a symbolic branch outside a guarded method of a user policy: its input, not ours
        return _error(console, symbolic_branch(e))
    except BrokenPipeError:  # the reader left early (`| head`): keep quiet, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except OSError as e:
        return _error(console, f"{e.filename}: {e.strerror}" if e.filename else str(e))
    except KeyboardInterrupt:  # a command that has a partial result prints it and returns 130 itself
        return _interrupted(console)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else OK


@contextmanager
def policy_timeout(seconds: float | None) -> Iterator[None]:
    """While it lasts, ``--policy-timeout`` is the limit of a call into a user policy, here
    and in the command's worker processes (which inherit the environment)."""
    if seconds is None:
        yield
        return
    previous = os.environ.get(user_code.LIMIT_ENV)
    user_code.set_limit(seconds)
    try:
        yield
    finally:
        user_code.set_limit(None if previous is None else float(previous))


def _interrupted(console: Console) -> int:
    console.clear()
    print("tokenbudget: interrupted", file=sys.stderr)
    return INTERRUPTED


def _error(console: Console, message: str) -> int:
    console.clear()
    print(f"tokenbudget: error: {clean(' '.join(message.split()), MAX_ERROR)}", file=sys.stderr)
    return BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
