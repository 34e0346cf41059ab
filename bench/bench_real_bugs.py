"""Benchmark: the whole ``tokenbudget check --policy`` on each real bug of tests/quality/real_bugs/.

Run after ``pip install -e .`` from the repository root::

    python bench/bench_real_bugs.py [--only MODULE ...] [--also SPEC ...] [--json]

For each bug (and each correct copy, and each ``--also`` policy, importable from tests/quality/)
it runs ``check --policy real_bugs.MODULE:Policy --json`` in a process of its own, with every
section, and prints the wall time, the CPU seconds of the command and its workers (on a shared
machine the steadier number), the seconds of each section, the verdict and the obligations that
failed. The test file runs only the section
that catches each bug; this is where the command's full cost on user code is measured.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUALITY = Path(__file__).resolve().parents[1] / "tests" / "quality"


def specs() -> list[str]:
    sys.path.insert(0, str(QUALITY))
    from real_bugs.copies import CORRECT_COPIES

    bugs = sorted(p.stem for p in (QUALITY / "real_bugs").glob("*.py") if p.stem not in ("__init__", "copies"))
    return [f"real_bugs.{b}:Policy" for b in bugs] + [f"real_bugs.{c}" for c in CORRECT_COPIES]


def run(spec: str, cache: Path) -> dict[str, object]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": os.pathsep.join([str(QUALITY),
                                                                                       os.environ.get("PYTHONPATH", "")])}
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-m", "tokenbudget.cli", "check", "--policy", spec, "--json", "--quiet"],
                              cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1)
    try:
        doc = json.loads(done.stdout)
        row = doc["policies"][0]
    except (ValueError, KeyError, IndexError):
        return {"policy": spec, "exit": done.returncode, "wall_s": round(wall, 1), "cpu_s": cpu,
                "error": done.stderr.strip()[-300:]}
    failed = sorted(name for name, cell in row["cells"].items() if cell == "UNEXPECTED")
    unknown = sorted(line.split(" / ", 1)[1].split(":")[0] for line in row.get("failures", []) if ": unknown (" in line)
    return {"policy": spec, "exit": done.returncode, "wall_s": round(wall, 1), "cpu_s": cpu, "failed": failed,
            "unknown": unknown, "sections": {k: round(v, 1) for k, v in doc["seconds"].items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=None, metavar="MODULE", help="bench only these bugs or copies")
    parser.add_argument("--also", nargs="+", default=[], metavar="SPEC",
                        help="bench these policies too (pkg.module:Class, from tests/quality/)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    chosen = [s for s in specs() if args.only is None or any(o in s for o in args.only)] + args.also
    results = []
    with tempfile.TemporaryDirectory() as cache:
        for spec in chosen:
            results.append(run(spec, Path(cache)))
            if not args.json:
                r = results[-1]
                print(f"{r['policy']:<50} exit {r['exit']}  {r['wall_s']:>7.1f} s  cpu {r['cpu_s']:>6.1f} s  "
                      f"{r.get('sections', '')}  {', '.join(r.get('failed', [])) or r.get('error', '')}"
                      + (f"  unknown: {', '.join(r['unknown'])}" if r.get("unknown") else ""), flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        wall, cpu = (sum(float(r[key]) for r in results) for key in ("wall_s", "cpu_s"))  # type: ignore[arg-type]
        print(f"total {wall:.1f} s (cpu {cpu:.1f} s) over {len(results)} policies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
