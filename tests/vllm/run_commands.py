"""Run several commands in this one process; write what each returned and printed as JSON.

Usage: ``python run_commands.py JOBS RESULTS``. JOBS is a JSON list of jobs, each
``["tokenbudget", *argv]`` (``tokenbudget.cli.main``), ``["pytest", *args]``
(``pytest.main``) or ``["vllm_version", RELEASE]`` (the jobs after it see ``vllm.__version__``
faked to RELEASE: a release no model knows); RESULTS gets one ``{"code", "stdout", "stderr", "seconds"}`` per job, in order,
or ``{"unavailable": why}`` alone when vLLM does not import here.
Importing vLLM is most of a command's time (~9 s), so the tests of one vLLM version run
their commands here and pay it once. Started with ``harness.vllm.folder.child_env(DIR)``, this
process is the child ``--engine-path DIR`` would start, so those commands run here too.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import time


def run(tool: str, args: list[str]) -> dict[str, object]:
    out, err, started = io.StringIO(), io.StringIO(), time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if tool == "tokenbudget":
                from tokenbudget.cli import main
                code = main(args)
            elif tool == "vllm_version":
                import vllm
                vllm.__version__ = args[0]
                code = 0
            else:
                assert tool == "pytest", tool
                import pytest
                code = int(pytest.main(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
            "seconds": round(time.perf_counter() - started, 3)}


if __name__ == "__main__":
    jobs_path, results_path = sys.argv[1:]
    with open(jobs_path) as f:
        jobs = json.load(f)
    from tokenbudget.harness.vllm.engine import EngineUnavailable, _import_vllm
    try:
        _import_vllm()
    except EngineUnavailable as exc:
        outcome: object = {"unavailable": str(exc)}
    else:
        outcome = [run(tool, args) for tool, *args in jobs]
    with open(results_path, "w") as f:
        json.dump(outcome, f)
