"""observe's scope rules on stand-ins for vLLM's objects (no vLLM here): which KV group is
read, which groups are judged, what is not judged on which scheduler, and when the step half
of progress is not asked."""
from __future__ import annotations

import enum
from types import SimpleNamespace

from tokenbudget.harness.vllm import observe


class FullAttentionSpec:
    block_size = 16


class SlidingWindowSpec:
    block_size = 16


class MambaSpec:
    block_size = 16


NULL_BLOCK = SimpleNamespace(block_id=0)


class FullAttentionManager:  # named as vLLM's managers, one per group, the way kv_groups tells the kinds apart
    block_size = 16
    block_pool = SimpleNamespace(null_block=NULL_BLOCK)


class SlidingWindowManager(FullAttentionManager):
    sliding_window, extra_retained_tokens = 8, 0


class MambaManager(FullAttentionManager):
    mamba_cache_mode, num_speculative_blocks = "align", 0


MANAGERS = {FullAttentionSpec: FullAttentionManager, SlidingWindowSpec: SlidingWindowManager, MambaSpec: MambaManager}


class Scheduler:  # named as vLLM's, the way observe tells the kinds apart
    def __init__(self, *specs: type, diffusion: bool = False, encoder_decoder: bool = False) -> None:
        groups = [SimpleNamespace(kv_cache_spec=spec()) for spec in specs]
        self.kv_cache_config = SimpleNamespace(kv_cache_groups=groups)
        self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(is_diffusion=diffusion))
        self.scheduler_config = SimpleNamespace(async_scheduling=False, prefill_schedule_interval=1)
        self.is_encoder_decoder = encoder_decoder
        self.num_sampled_tokens_per_step = 0 if diffusion else 1
        self.connector = None
        self.kv_cache_manager = KVCacheManager(tuple(MANAGERS[spec]() for spec in specs))


class AsyncScheduler(Scheduler):
    pass


class Coordinator:
    def __init__(self, managers: tuple[object, ...]) -> None:
        self.single_type_managers = managers


class KVCacheManager:
    def __init__(self, managers: tuple[object, ...] = ()) -> None:
        self.block_pool = SimpleNamespace()
        self.coordinator = Coordinator(managers)

    def allocate_slots(self) -> None:
        """A method a test may replace on the instance."""


class PauseState(enum.IntEnum):
    UNPAUSED = 0
    PAUSED_ALL = 2


def test_every_group_with_a_written_rule_is_judged_and_each_other_group_says_why_not() -> None:
    assert observe.kv_group(Scheduler(SlidingWindowSpec, FullAttentionSpec)) == 1
    assert observe.scope(Scheduler(SlidingWindowSpec, FullAttentionSpec)).excluded == {}
    assert observe.scope(Scheduler(SlidingWindowSpec)).excluded == {}
    hybrid = Scheduler(SlidingWindowSpec, MambaSpec)
    excluded = observe.scope(hybrid).excluded
    assert set(excluded) == {"kv-capacity (group 1)"} and "align-mode Mamba" in excluded["kv-capacity (group 1)"]
    assert observe.scope(hybrid).applies("kv-capacity")
    assert [(i, g.kind, g.span) for i, g in observe.judged_groups(hybrid)] == [(0, "sliding window", 8)]
    assert observe.judged_groups(Scheduler(FullAttentionSpec)) == []  # the one table of observe.blocks is all
    alone = observe.scope(Scheduler(MambaSpec)).excluded
    assert set(alone) == {"kv-capacity"} and "align-mode Mamba" in alone["kv-capacity"]


def test_diffusion_and_encoder_decoder_schedulers_say_what_is_not_judged() -> None:
    assert set(observe.scope(Scheduler(FullAttentionSpec, diffusion=True)).excluded) == {"spec-shape"}
    assert set(observe.scope(Scheduler(FullAttentionSpec, encoder_decoder=True)).excluded) == {
        "model-len", "kv-capacity", "encoder-ready"}


def test_the_step_half_of_progress_is_asked_of_the_plain_loop_sync_or_async_only() -> None:
    plain = Scheduler(FullAttentionSpec)
    assert observe.progress_judged(plain) is None and observe.held_back(plain) is None
    assert observe.progress_judged(AsyncScheduler(FullAttentionSpec)) is None
    staggered = Scheduler(FullAttentionSpec)
    staggered.decode_stagger = 2  # pipeline-parallel microbatching holds a decode back for its slot
    assert "stagger" in observe.progress_judged(staggered)
    assert "does not follow" in observe.progress_judged(type("DiffusionScheduler", (Scheduler,), {})())
    assert "pooling, diffusion" in observe.progress_judged(Scheduler(FullAttentionSpec, diffusion=True))
    plain.connector = object()
    assert "connector" in observe.progress_judged(plain)


def test_a_paused_scheduler_or_a_test_double_in_its_kv_manager_holds_requests_back() -> None:
    paused = Scheduler(FullAttentionSpec)
    paused._pause_state = PauseState.PAUSED_ALL
    assert observe.held_back(paused) == "paused (PAUSED_ALL)"
    doubled = Scheduler(FullAttentionSpec)
    doubled.kv_cache_manager.allocate_slots = lambda: None
    assert observe.held_back(doubled) == "KVCacheManager.allocate_slots replaced"
