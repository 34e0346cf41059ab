"""Every KV cache group of a real vLLM scheduler judged by `kv-capacity`: full attention with
a sliding window, a sliding window alone, chunked local attention alone, full attention with
Mamba. Real passes hold in each; a slip planted in one group's manager (a window freed one
block too early, a table one block short) is reported in that group. On vLLM 0.32 here,
0.33 and 0.34 in a child."""
from __future__ import annotations

import subprocess
import sys
from typing import Any, Callable

import pytest

from tokenbudget import monitor
from tokenbudget.harness.vllm import observe
from tokenbudget.harness.vllm.engine import VllmEngine
from tokenbudget.harness.vllm.folder import child_env
from tokenbudget.model import BudgetConfig
from tokenbudget.spec.kv_groups import CHUNKED_LOCAL, FULL, MAMBA, SLIDING_WINDOW

pytestmark = pytest.mark.vllm
BLOCK = 4
WINDOW = 8  # the sliding window and the local chunk, in tokens: two blocks
CONFIG = BudgetConfig(max_num_batched_tokens=32, max_num_seqs=4, num_speculative_tokens=2, method="ngram",
                      block_size=BLOCK, num_kv_blocks=128, max_model_len=64, enable_prefix_caching=True)


def group(kind: str, **extra: Any) -> Any:
    """One of vLLM's ``KVCacheGroupSpec``s: full, sliding, chunked or mamba (state, not slots)."""
    import torch
    from vllm.v1 import kv_cache_interface as kv

    if kind == "mamba":
        spec = kv.MambaSpec(block_size=BLOCK, shapes=((1, 1),), dtypes=(torch.float32,), mamba_cache_mode="none",
                            num_speculative_blocks=2)
    else:
        cls = {"full": kv.FullAttentionSpec, "sliding": kv.SlidingWindowSpec,
               "chunked": kv.ChunkedLocalAttentionSpec}[kind]
        spec = cls(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32, **extra)
    return kv.KVCacheGroupSpec([kind], spec)


def sliding() -> Any:
    return group("sliding", sliding_window=WINDOW)


def chunked() -> Any:
    return group("chunked", attention_chunk_size=WINDOW)


def run(groups: list[Any], plant: Callable[[Any], None] = lambda manager: None, group_index: int = 0,
        caching: bool = True) -> tuple[VllmEngine, monitor.Monitor, list[Any]]:
    """Three requests sharing a prefix, decoded past their windows under the monitor, with
    ``plant`` applied first to group ``group_index``'s manager: the engine, the monitor, the records."""
    engine = VllmEngine(CONFIG.replace(enable_prefix_caching=caching), groups)
    watched = monitor.attach(engine.scheduler)
    plant(engine.scheduler.kv_cache_manager.coordinator.single_type_managers[group_index])
    for rid, prompt in (("a", 20), ("b", 9), ("c", 30)):
        engine.add(rid, prompt, 12, prefix_group="sys", prefix_len=8)
    records = [engine.step({"a": 1, "b": 2}).record for _ in range(14)]
    return engine, watched, records


def null_entries(records: list[Any], kind: str) -> int:
    """How many null blocks the tables of ``kind``'s group held over the run: blocks freed."""
    return sum(table.count(g.null_block) for rec in records for g, tables, _ in rec.kv_groups if g.kind == kind
               for table in tables.values())


def kv_breaches(watched: monitor.Monitor) -> list[str]:
    return [v.violation.message for v in watched.violations if v.violation.invariant == "kv-capacity"]


@pytest.mark.parametrize("groups, kinds, caching", [
    (lambda: [group("full"), sliding()], [FULL, SLIDING_WINDOW], True),
    (lambda: [sliding()], [SLIDING_WINDOW], True),
    (lambda: [chunked()], [CHUNKED_LOCAL], True),
    (lambda: [group("full"), group("mamba")], [FULL, MAMBA], False),  # 0.33 on: Mamba caches only in align mode
], ids=["full+sliding", "sliding", "chunked", "full+mamba"])
def test_real_passes_hold_in_every_group_while_its_freed_blocks_turn_null(
        vllm_imported: None, groups: Callable[[], list[Any]], kinds: list[str], caching: bool) -> None:
    engine, watched, records = run(groups(), caching=caching)
    assert observe.scope(engine.scheduler).excluded == {}
    assert watched.violations == [] and watched.stats.steps == 14
    assert watched.stats.kv_groups == {" + ".join(kinds): 1}
    assert [tables.group.kind for tables in records[3].kv_groups] == kinds
    assert null_entries(records, kinds[-1]) > 0  # the last group freed blocks: its rule was exercised


def free_one_block_early(manager: Any) -> None:
    """A slip: the manager's window (or chunk) starts one block later than its attention reads."""
    skipped = manager.get_num_skipped_tokens
    manager.get_num_skipped_tokens = lambda computed: skipped(computed) + BLOCK if computed >= WINDOW else 0


@pytest.mark.parametrize("groups, index, kind", [
    (lambda: [sliding()], 0, SLIDING_WINDOW),
    (lambda: [group("full"), sliding()], 1, SLIDING_WINDOW),
    (lambda: [chunked()], 0, CHUNKED_LOCAL),
], ids=["sliding", "full+sliding", "chunked"])
def test_a_block_freed_inside_the_window_is_reported_in_its_group(
        vllm_imported: None, groups: Callable[[], list[Any]], index: int, kind: str) -> None:
    _, watched, _ = run(groups(), free_one_block_early, index)
    found = kv_breaches(watched)
    assert found and "holds the null block at slots" in found[0] and f"in its {kind} group, inside" in found[0], found


def allocate_one_block_short(manager: Any) -> None:
    """A slip: the manager gives a table one block fewer than its slots need, past the first."""
    allocate = manager.allocate_new_blocks

    def short(request_id: str, num_tokens: int, num_tokens_main_model: int) -> Any:
        return allocate(request_id, max(num_tokens - BLOCK, 1), num_tokens_main_model)
    manager.allocate_new_blocks = short


def test_a_sliding_window_table_one_block_short_is_reported_beside_a_sound_full_group(vllm_imported: None) -> None:
    _, watched, _ = run([group("full"), sliding()], allocate_one_block_short, 1)
    found = kv_breaches(watched)
    assert found and all(f"in its {SLIDING_WINDOW} group" in message for message in found), found
    assert "KV slots in its" in found[0] and "writes to" in found[0]


@pytest.mark.parametrize("fixture", ["vllm033_path", "vllm034_path"])
def test_the_same_on_vllm_0_33_and_0_34(fixture: str, request: pytest.FixtureRequest) -> None:
    """This file's tests on the managers of vLLM 0.33.0 and 0.34.0, in a child pytest."""
    env = child_env(request.getfixturevalue(fixture))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", __file__,
                           "-k", "not the_same_on"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "8 passed" in done.stdout.splitlines()[-1], done.stdout[-3000:] + done.stderr[-2000:]
