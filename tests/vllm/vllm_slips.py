"""One-line slips in vLLM 0.33.0's scheduler (and 0.34.0's), planted one at a time into a copy of it.

Each slip replaces one line (found by its text, the n-th time it occurs; a line number is only
cited) of a file of the vLLM folder. ``plant`` copies the folder's ``vllm``
package to a new folder and changes that one line there; the original is never written.
The bench (bench/bench_vllm_slips.py) fuzzes every slip; tests/vllm plants some. ``moved`` gives a
slip's line in a release that moved or rewrote it, ``at`` each release's line number (its citation,
which tests/vllm/test_slip_lines.py checks against the unpacked releases). A slip whose
``equivalent`` is set changes the text but not what the scheduler does (the reason; SPEC.md
§7 argues it from the cited lines): no check that watches the scheduler can catch it.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from planted_line import replace_line

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
SPECULATIVE = "vllm/config/speculative.py"
STANDALONE_AR = "vllm/v1/worker/gpu/spec_decode/standalone_ar/config.py"  # 0.34: the draft model's d


@dataclass(frozen=True)
class Slip:
    name: str
    what: str
    file: str
    old: str  # the line's text, stripped
    new: str  # what replaces it, stripped (the indentation is kept)
    occurrence: int = 1  # which line of that text
    equivalent: str = ""  # why the change is no slip (the scheduler does the same): argued in SPEC.md §7
    moved: tuple[tuple[tuple[int, int], str, str, str], ...] = ()  # (from release, file, old, new) where it moved
    at: tuple[tuple[str, int], ...] = ()  # (release, line number) of the planted line: its citation, checked

    def line_in(self, release: tuple[int, ...]) -> tuple[str, str, str]:
        """The file, the line and its replacement in vLLM ``release`` (its leading numbers)."""
        found = (self.file, self.old, self.new)
        for since, *where in self.moved:
            if release[:2] >= since:
                found = (where[0], where[1], where[2])
        return found


SLIPS: tuple[Slip, ...] = (
    Slip("refund-omits-draft-slots", "a same-step refund gives back the grant but not the draft slots",
         SCHEDULER, "input_budget += restored + draft_slots", "input_budget += restored",
         at=(("0.33.0", 955), ("0.34.0", 971))),
    Slip("refund-twice", "a same-step refund of the input budget applied twice",
         SCHEDULER, "input_budget += restored + draft_slots", "input_budget += 2 * (restored + draft_slots)",
         at=(("0.33.0", 955), ("0.34.0", 971))),
    Slip("token-refund-twice", "a same-step refund of the token budget applied twice",
         SCHEDULER, "token_budget += restored", "token_budget += 2 * restored",
         at=(("0.33.0", 954), ("0.34.0", 970))),
    Slip("running-loop-no-input-exit", "the running loop without its input_budget <= draft_slots exit",
         SCHEDULER, "if input_budget <= draft_slots:", "if input_budget < 0:",
         equivalent="past the exit every grant is clamped to 0 and its request skipped, with no side effect",
         at=(("0.33.0", 797), ("0.34.0", 813))),
    Slip("draft-slots-are-k", "the scheduler's draft-slot count is k, not the method's slots",
         SCHEDULER, "draft_slots = spec.max_num_new_slots_for_drafting if spec is not None else 0",
         "draft_slots = spec.num_speculative_tokens if spec is not None else 0",
         at=(("0.33.0", 721), ("0.34.0", 737))),
    Slip("draft-model-slots-zero", "the config counts no draft slot for a serial draft model (vLLM's own d)",
         SPECULATIVE, "return 1", "return 0",
         # moved: SpeculativeConfig asks the method's speculator config, speculative.py:1743-1751 (vLLM 0.34.0)
         moved=(((0, 34), STANDALONE_AR, "return 1", "return 0"),),
         at=(("0.33.0", 2096), ("0.34.0", 26))),
    Slip("waiting-loop-exit-loose", "the waiting loop stops at input_budget < draft_slots, not <=",
         SCHEDULER, "if not request_queue or input_budget <= draft_slots:",
         "if not request_queue or input_budget < draft_slots:",
         # rewritten: while True, this exit only with a seat and tokens left, scheduler.py:1092-1112 (vLLM 0.34.0)
         moved=(((0, 34), SCHEDULER, "not loads_only and input_budget <= draft_slots",
                 "not loads_only and input_budget < draft_slots"),),
         at=(("0.33.0", 1068), ("0.34.0", 1111))),
    Slip("running-charge-omits-draft-slots", "the running loop charges the grant but not its draft slots",
         SCHEDULER, "input_budget -= num_new_tokens + draft_slots", "input_budget -= num_new_tokens",
         at=(("0.33.0", 1003), ("0.34.0", 1019))),
    Slip("waiting-charge-omits-draft-slots", "the waiting loop charges the grant but not its draft slots",
         SCHEDULER, "input_budget -= num_new_tokens + draft_slots", "input_budget -= num_new_tokens", 2,
         at=(("0.33.0", 1571), ("0.34.0", 1635))),
    Slip("running-grant-ignores-draft-slots", "a running grant is bounded by the input budget, not less d",
         SCHEDULER, "num_new_tokens, token_budget, input_budget - draft_slots",
         "num_new_tokens, token_budget, input_budget",
         at=(("0.33.0", 847), ("0.34.0", 863))),
    Slip("waiting-grant-ignores-draft-slots", "an admission is bounded by the input budget, not less d",
         SCHEDULER, "request_token_budget = min(token_budget, input_budget - draft_slots)",
         "request_token_budget = min(token_budget, input_budget)",
         at=(("0.33.0", 1295), ("0.34.0", 1345))),
    Slip("priority-victim-min", "under priority the most urgent running request is preempted, not the least",
         SCHEDULER, "preempted_req = max(", "preempted_req = min(",
         at=(("0.33.0", 933), ("0.34.0", 949))),
)
BY_NAME = {s.name: s for s in SLIPS}


def plant(engine: Path, slip: Slip | None, into: Path) -> Path:
    """Copy ``engine``'s vllm package (and its dist-info) under ``into`` with the slip
    planted (None: as it is); the new folder.
    ValueError when the line is not there (the slip is for another vLLM)."""
    for part in [engine / "vllm", *engine.glob("vllm-*.dist-info")]:
        shutil.copytree(part, into / part.name, ignore=shutil.ignore_patterns("__pycache__"))
    if slip is None:
        return into
    file, old, new = slip.line_in(_release(engine))
    replace_line(into / file, old, new, slip.occurrence)
    return into


def _release(engine: Path) -> tuple[int, ...]:
    """The leading numbers of the release in ``engine``'s dist-info folder name (() without one)."""
    for info in engine.glob("vllm-*.dist-info"):
        numbers = info.name.removeprefix("vllm-").removesuffix(".dist-info").split(".")
        return tuple(int(n) for n in numbers if n.isdigit())
    return ()
