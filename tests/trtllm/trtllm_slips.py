"""One-line slips in TensorRT-LLM's scheduler.py at 002f3cc3, planted one at a time into a copy of it.

Each slip replaces one line (found by its text, so a slip names no line number) of
``tensorrt_llm/_torch/pyexecutor/scheduler/scheduler.py``; ``plant`` writes the changed file into a
new folder laid out as the archive (the runtime loads that one file), the original never written.
The bench (bench/bench_trtllm_slips.py) fuzzes every slip; tests/trtllm plants them. A slip whose
``equivalent`` is set changes the text but not what the scheduler does (the reason, from the cited
lines): no check that watches the scheduler can catch it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planted_line import replace_line

SCHEDULER = Path("tensorrt_llm", "_torch", "pyexecutor", "scheduler", "scheduler.py")


@dataclass(frozen=True)
class Slip:
    name: str
    what: str
    old: str  # the line's text, stripped
    new: str  # what replaces it, stripped (the indentation is kept)
    occurrence: int = 1  # which line of that text
    equivalent: str = ""


SLIPS: tuple[Slip, ...] = (
    Slip("generation-drafts-uncharged", "a generation request is charged its beam width, not its drafts (line 1009)",
         "req_num_tokens = beam_width + req.num_draft_tokens", "req_num_tokens = beam_width"),
    Slip("drafts-kept-on-every-chunk", "_fit_draft_tokens keeps drafts on every chunk, not the last only (line 1307)",
         "if req.is_last_context_chunk and req.has_draft_tokens():", "if req.has_draft_tokens():"),
    Slip("drafts-charged-on-every-chunk", "the tentative chunk charges drafts on every chunk, not the last (line 982)",
         "if (req.is_last_context_chunk and req.has_draft_tokens())", "if req.has_draft_tokens()",
         equivalent="line 979 sets the chunk to the context's remainder just before, so every tentative chunk is "
                    "its last one there"),
)
BY_NAME = {slip.name: slip for slip in SLIPS}


def plant(folder: Path, slip: Slip, dest: Path) -> Path:
    """``dest`` holding ``folder``'s scheduler.py with ``slip`` planted; ValueError when the
    line is not there as many times as ``occurrence`` asks."""
    target = dest / SCHEDULER
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((folder / SCHEDULER).read_text())
    replace_line(target, slip.old, slip.new, slip.occurrence)
    return dest
