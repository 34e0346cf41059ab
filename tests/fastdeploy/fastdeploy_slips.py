"""One-line slips in FastDeploy's scheduler at 2a606e361, planted one at a time into a copy of it.

Each slip replaces one line (found by its text, the n-th time it occurs, so a slip names no
line number) of fastdeploy/engine/sched/resource_manager_v1.py, in its decode
preallocation, prefill blocks, admission, reserve, seat or preemption rule (SPEC.md §11).
``plant`` copies the folder's ``fastdeploy`` package to a new folder of the same name (the name
carries the commit, ``runtime.commit``) and changes that one line there; the original is never written.
The bench (bench/bench_fastdeploy_slips.py) fuzzes every slip; tests/fastdeploy plants one.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from planted_line import replace_line

SCHEDULER = "fastdeploy/engine/sched/resource_manager_v1.py"


@dataclass(frozen=True)
class Slip:
    name: str
    what: str
    old: str  # the line's text, stripped
    new: str  # what replaces it, stripped (the indentation is kept)
    occurrence: int = 1  # which line of that text
    file: str = SCHEDULER


SLIPS: tuple[Slip, ...] = (
    Slip("prealloc-threshold-strict", "a decode gets its 2 blocks only under the slot threshold, not at it",
         "<= self.config.cache_config.prealloc_dec_block_slot_num_threshold",
         "< self.config.cache_config.prealloc_dec_block_slot_num_threshold"),
    Slip("prealloc-one-block", "a visited decode is given 1 block, not FD_ENC_DEC_BLOCK_NUM = 2",
         "self._allocate_gpu_blocks(request, self.config.cache_config.enc_dec_block_num)",
         "self._allocate_gpu_blocks(request, 1)"),
    Slip("chunk-blocks-no-draft-block", "a prefill chunk takes no extra block for the drafts",
         "block_num = min(block_num + 1, self.config.cache_config.max_block_num_per_seq)",
         "block_num = min(block_num, self.config.cache_config.max_block_num_per_seq)"),
    Slip("admission-ignores-reserve", "admission asks for the chunk's blocks only, not the running requests' reserve",
         "num_chunk_new_block + len(self.running) * self.current_reserve_output_block_num",
         "num_chunk_new_block"),
    Slip("admission-no-draft-block", "the admission threshold without its one more block for a method",
         "can_schedule_block_num_threshold + 1, self.config.cache_config.max_block_num_per_seq",
         "can_schedule_block_num_threshold, self.config.cache_config.max_block_num_per_seq"),
    Slip("preemption-keeps-relaxed", "a preemption leaves admission relaxed instead of asking for the reserve again",
         "self.can_relax_prefill_strategy = False", "self.can_relax_prefill_strategy = True"),
    Slip("preemption-keeps-decayed-reserve", "a preemption resets the reserve but not its decaying float",
         "self.current_reserve_output_block_num_float = self.init_reserve_output_block_num", "pass", 2),
    Slip("preemption-victim-head", "a preemption takes the head of the running list, not its tail",
         "preempted_req = self.running.pop()", "preempted_req = self.running.pop(0)"),
    Slip("waiting-after-preemption", "the waiting loop runs in a pass that preempted",
         "if not preempted_reqs:", "if True:"),
    Slip("seats-omit-preempted", "the seat check does not count preempted requests waiting",
         "+ sum([req.status == RequestStatus.PREEMPTED for req in self.waiting])", "+ 0"),
    Slip("seat-check-off-by-one", "the seat check admits one request past max_num_seqs",
         ">= self.max_num_seqs", "> self.max_num_seqs"),
)
BY_NAME = {s.name: s for s in SLIPS}


def plant(engine: Path, slip: Slip | None, into: Path) -> Path:
    """Copy the ``fastdeploy`` package of the folder ``engine`` to ``into/<its name>`` with the slip planted
    (None: as it is); the new folder. ValueError when the line is not there (the slip is
    for another commit)."""
    copy = into / engine.name
    shutil.copytree(engine / "fastdeploy", copy / "fastdeploy", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if slip is None:
        return copy
    path = copy / slip.file
    replace_line(path, slip.old, slip.new, slip.occurrence)
    return copy
