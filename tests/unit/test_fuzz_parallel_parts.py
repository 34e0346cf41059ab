"""The parts of parallel fuzzing that need no process: rare-path counts, seed streams,
merging workers' reports, naming a database."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from tokenbudget.fuzz.coverage import PATHS, paths_taken
from tokenbudget.fuzz.database import DatabaseError, default_database, open_database
from tokenbudget.fuzz.parallel import Live, abandon_hung, merge, sigint_held, stream_seed
from tokenbudget.fuzz.session import Counterexample, FuzzReport
from tokenbudget.fuzz.session import Tally
from tokenbudget.model import BudgetConfig
from tokenbudget.render import live
from tokenbudget.spec import LedgerEntry, StepLimits, StepRecord
from tokenbudget.spec.trace import Trace

LIMITS = StepLimits(max_num_batched_tokens=20, max_num_scheduled_tokens=20, max_num_seqs=4, num_speculative_tokens=0,
                    draft_slots=0, lookahead=0, max_model_len=64, block_size=4, num_kv_blocks=32)
PLAIN = StepRecord(step=0, limits=LIMITS, num_scheduled_tokens={"0": 8}, scheduled_draft_tokens={"0": 0},
                   runner_rows={"0": 8}, computed_before={"0": 0}, num_tokens={"0": 30}, padded=frozenset(),
                   prefill=frozenset({"0"}), preempted=(), running=("0",), waiting=(), kv_blocks_in_use=2,
                   block_tables={"0": (0, 1)}, block_keys={},
                   ledger=(LedgerEntry("grant", "0", 8, 20, 12, 20, 12),))
CFG = BudgetConfig(max_num_batched_tokens=20, max_num_seqs=4, block_size=4, num_kv_blocks=32, max_model_len=64)


@pytest.mark.parametrize("path, record, cfg", [
    ("same-step-refund", replace(PLAIN, ledger=PLAIN.ledger + (LedgerEntry("refund", "0", 8, 12, 20, 12, 20),)), CFG),
    ("padded-admission", replace(PLAIN, padded=frozenset({"0"})), CFG),
    ("threshold-cut", PLAIN, CFG.replace(long_prefill_token_threshold=8)),
    ("priority-preemption", replace(PLAIN, preempted=("1",)), CFG.replace(scheduling_policy="priority")),
    ("kv-pressure", replace(PLAIN, kv_blocks_in_use=32), CFG),
    ("max-model-len", replace(PLAIN, computed_before={"0": 55}, num_tokens={"0": 70}), CFG),
])
def test_each_rare_path_is_seen_and_only_there(path: str, record: StepRecord, cfg: BudgetConfig) -> None:
    assert paths_taken(PLAIN, CFG) == []
    assert path in PATHS and path in paths_taken(record, cfg)


def test_a_preemption_under_fcfs_is_kv_pressure_only() -> None:
    assert paths_taken(replace(PLAIN, preempted=("1",)), CFG) == ["kv-pressure"]


def test_worker_0_keeps_the_seed_and_the_others_get_their_own_streams() -> None:
    assert stream_seed(7, 0) == 7
    seeds = {stream_seed(7, w, r) for w in range(4) for r in range(50)}
    assert len(seeds) == 200 and stream_seed(7, 1, 3) == stream_seed(7, 1, 3)


def _found(kind: str, first_seen: float, seed: int) -> Counterexample:
    return Counterexample(kind, kind, Trace(policy="p", config={}, ops=()), (), 1, first_seen, 3, seed)


def test_merged_reports_add_up_and_keep_each_kind_once_the_earliest() -> None:
    a = FuzzReport("p", "model", 0, examples=10, steps=100, seconds=2.0,
                   counterexamples=[_found("input-rows-cap", 1.5, 0), _found("kv-capacity", 0.5, 0)])
    b = FuzzReport("p", "model", 9, examples=5, steps=40, seconds=3.0, counterexamples=[_found("input-rows-cap", 0.7, 9)])
    a.coverage.update({"kv-pressure": 2})
    b.coverage.update({"kv-pressure": 1, "threshold-cut": 4})
    merged = merge([a, b])
    assert (merged.examples, merged.steps, merged.seconds) == (15, 140, 3.0)
    assert merged.coverage == {"kv-pressure": 3, "threshold-cut": 4}
    assert [(c.kind, c.seed) for c in merged.counterexamples] == [("kv-capacity", 0), ("input-rows-cap", 9)]


def test_a_database_is_named_by_a_folder_a_redis_url_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert open_database("none") is None
    assert isinstance(open_database(str(tmp_path)), DirectoryBasedExampleDatabase)
    monkeypatch.delenv("TOKENBUDGET_DATABASE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_database() == str(tmp_path / "tokenbudget" / "examples")
    monkeypatch.setenv("TOKENBUDGET_DATABASE", "redis://127.0.0.1:1/0")
    assert default_database() == "redis://127.0.0.1:1/0"


@pytest.mark.parametrize("where, words", [
    ("http://127.0.0.1/", "expected a folder, redis://HOST:PORT/N or none"),
    ("redis://127.0.0.1/0", "expected redis://HOST:PORT/N"),
    ("redis://127.0.0.1:6379/x", "expected redis://HOST:PORT/N"),
    ("redis://127.0.0.1:1/0", "cannot reach Redis"),
])
def test_a_database_that_cannot_be_used_is_one_error(where: str, words: str) -> None:
    with pytest.raises(DatabaseError, match=words) as error:
        open_database(where)
    assert "\n" not in str(error.value)


def test_the_live_line_merges_workers_and_counts_each_policy_once_per_kind() -> None:
    counts = Live(2)
    counts.add("fastdeploy-v0", Tally(3, 40, {"kv-pressure": 2}, ("input-rows-cap",)))
    counts.add("fastdeploy-v0", Tally(2, 10, {"kv-pressure": 1}, ("input-rows-cap",)))
    counts.add("vllm-static", Tally(1, 5, {}, ("input-rows-cap",)))
    line = live(counts)
    assert (counts.examples, counts.steps) == (6, 55) and "2 workers 6 ex" in line
    assert "violated input-rows-capx2" in line and "kv-pressure:3" in line and "same-step-refund:0" in line


def test_a_ctrl_c_inside_a_held_block_is_raised_once_the_block_ends() -> None:
    done = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a pytest-xdist worker ignores SIGINT
    try:
        with pytest.raises(KeyboardInterrupt):
            with sigint_held():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("the rest of the block")
        assert done == ["the rest of the block"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


class _Process:
    def __init__(self) -> None:
        self.terminated = False

    def terminate(self) -> None:
        self.terminated = True


def test_past_the_start_up_cap_the_workers_that_built_no_target_are_stopped() -> None:
    processes = [_Process(), _Process(), _Process()]
    abandoned: set[int] = set()
    abandon_hung(processes, {1}, abandoned, startup_ends=time.time() + 3600)  # the cap not reached: none stopped
    assert abandoned == set() and not any(p.terminated for p in processes)
    abandon_hung(processes, {1}, abandoned, startup_ends=time.time() - 1)
    assert abandoned == {0, 2} and [p.terminated for p in processes] == [True, False, True]


def test_merged_start_up_is_the_longest_and_exceeded_if_any_worker_exceeded_it() -> None:
    merged = merge([FuzzReport("p", "model", 0, examples=3, startup_seconds=2.0),
                    FuzzReport("p", "model", 0, startup_seconds=9.0, startup_exceeded=True)])
    assert merged.examples == 3 and merged.startup_seconds == 9.0 and merged.startup_exceeded
