"""Each one-pass engine loop's ``honours`` declaration is true: run every such loop,
instrumented, on the corpus traces of its policies and on a workload that fills a small KV
pool; a hook or variant flag it declares is called or read, one it does not declare never
is. An engine loop that is no ``OnePassLoop`` has none of them. And a variant that changes
one its loop never uses is refused when it loads."""
from __future__ import annotations

import io
import sys
import textwrap
from contextlib import redirect_stderr, redirect_stdout

import pytest

from tokenbudget.cli import main
from tokenbudget.model import BudgetConfig, ConfigError, builtin_policies, get_policy, scheduler_for
from tokenbudget.model.config_edges import least_pool, validates
from tokenbudget.model.one_pass_loop import ENGINE_FLAGS, HOOKS, VARIANT_FLAGS, OnePassLoop
from tokenbudget.model.trtllm.loop import TrtllmLoop
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.corpus import load_corpus

ENGINE_LOOPS = sorted({cls.loop for cls in builtin_policies().values()}, key=lambda c: c.__name__)
ONE_PASS_LOOPS = [loop for loop in ENGINE_LOOPS if issubclass(loop, OnePassLoop)]


class _Read:
    """A variant flag that notes each read."""

    def __init__(self, name: str, value: bool, seen: set[str]) -> None:
        self.name, self.value, self.seen = name, value, seen

    def __get__(self, obj: object, owner: type) -> bool:
        self.seen.add(self.name)
        return self.value


def instrumented(loop: type[OnePassLoop], seen: set[str]) -> type[OnePassLoop]:
    """``loop`` with every hook and variant flag noting its use in ``seen``, unchanged otherwise."""
    namespace: dict[str, object] = {}
    for hook in HOOKS:
        def call(cls, *args, _base=getattr(loop, hook).__func__, _hook=hook, **kwargs):  # type: ignore[no-untyped-def]
            seen.add(_hook)
            return _base(cls, *args, **kwargs)
        namespace[hook] = classmethod(call)
    for flag in VARIANT_FLAGS:
        namespace[flag] = _Read(flag, getattr(loop, flag), seen)
    return type(f"Counting{loop.__name__}", (loop,), namespace)


def _on(policy_name: str, loop: type[OnePassLoop]):  # type: ignore[no-untyped-def]
    policy = builtin_policies()[policy_name]()
    policy.loop = loop
    return policy


def _fill_the_pool(policy_name: str, loop: type[OnePassLoop], cfg: BudgetConfig) -> None:
    """Eight requests on the least pool the policy accepts (TensorRT-LLM's: eight of it, prompts up to the
    budget), every draft accepted, until they drain: admissions, decodes, preemptions or exhausted budgets."""
    policy = _on(policy_name, loop)
    if not validates(policy, cfg):  # a corpus trace of a refused config
        return
    pool, prompt = least_pool(policy, cfg), max(1, min(8, cfg.max_model_len // 4))
    if issubclass(loop, TrtllmLoop):  # its KV manager throws where another engine preempts (T1, T2): room for
        pool, prompt = 8 * pool, max(1, min(cfg.max_num_batched_tokens, cfg.max_model_len // 2))  # all, long prompts
    cfg = cfg.replace(num_kv_blocks=pool)
    sched = scheduler_for(cfg, policy)
    for i in range(8):
        sched.add_request(f"r{i}", prompt, max(1, cfg.max_model_len - prompt - 1))
    for _ in range(2000):
        if not sched.has_unfinished:
            break
        record = sched.schedule()
        sched.update_from_output(record, {rid: cfg.num_speculative_tokens for rid in record.num_scheduled_tokens})


@pytest.mark.parametrize("engine_loop", ONE_PASS_LOOPS, ids=lambda c: c.__name__)
def test_a_loop_uses_exactly_the_hooks_and_flags_it_declares(engine_loop):
    seen: set[str] = set()
    loop = instrumented(engine_loop, seen)
    names = [name for name, cls in builtin_policies().items() if cls.loop is engine_loop]
    # an async trace runs AsyncVllmLoop, not the instrumented loop
    traces = [t for t in load_corpus() if t.policy in names and not t.config.get("async_scheduling")]
    assert traces, f"no corpus trace runs on {engine_loop.__name__}"
    for trace in traces:
        replay_on_model(trace, _on(trace.policy, loop))
        _fill_the_pool(trace.policy, loop, BudgetConfig.from_dict(trace.config))
    assert seen == set(engine_loop.honours), (
        f"{engine_loop.__name__} declares {sorted(engine_loop.honours)}, its step used {sorted(seen)}")


def test_every_one_pass_engine_loop_states_its_declaration():
    assert {loop.__name__ for loop in ONE_PASS_LOOPS} == {"VllmLoop", "FastDeployLoop", "TrtllmLoop"}
    for loop in ONE_PASS_LOOPS:
        assert "honours" in vars(loop), f"{loop.__name__} inherits its honours instead of stating them"
        assert set(loop.honours) <= set(HOOKS + VARIANT_FLAGS)


def test_a_loop_of_its_own_step_has_no_hook_nor_one_pass_flag():
    others = [loop for loop in ENGINE_LOOPS if loop not in ONE_PASS_LOOPS]
    assert [loop.__name__ for loop in others] == ["SglangLoop"]
    for loop in others:
        assert not [name for name in HOOKS + VARIANT_FLAGS + ENGINE_FLAGS + ("honours",) if hasattr(loop, name)]


VARIANTS = '''
    from tokenbudget.model import SglangLoop, TrtllmLoop, VllmLoop
    from tokenbudget.model.sglang.policies import Sglang
    from tokenbudget.model.trtllm.policies import Trtllm
    from tokenbudget.model.vllm.policies import VllmAdaptive


    class GrantAll(TrtllmLoop):
        @classmethod
        def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):
            return demand


    class TrtllmGrantAll(Trtllm):
        loop = GrantAll


    class HeadVictim(TrtllmLoop):
        @classmethod
        def victim(cls, priority_scheduling, running, priority, arrival):
            return [i == 0 for i in range(len(running))]


    class TrtllmHeadVictim(Trtllm):
        loop = HeadVictim


    class NoRunningExit(SglangLoop):
        running_checks_exit_rule = False


    class SglangNoRunningExit(Sglang):
        loop = NoRunningExit


    class SglangGrant(SglangLoop):
        @classmethod
        def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):
            return demand


    class SglangGrantAll(Sglang):
        loop = SglangGrant


    class SglangPadded(SglangLoop):
        pads_short_admissions = True


    class SglangPads(Sglang):
        loop = SglangPadded


    class OwnPass(TrtllmLoop):
        honours = TrtllmLoop.honours | {"running_grant"}  # its own running pass calls it

        @classmethod
        def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):
            return demand


    class TrtllmOwnPass(Trtllm):
        loop = OwnPass


    class HeadVictimVllm(VllmLoop):
        @classmethod
        def victim(cls, priority_scheduling, running, priority, arrival):
            return [i == 0 for i in range(len(running))]


    class VllmHeadVictim(VllmAdaptive):
        loop = HeadVictimVllm
'''


@pytest.fixture(scope="module")
def variants(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("variants")
    (folder / "loop_hook_variants.py").write_text(textwrap.dedent(VARIANTS))
    sys.path.insert(0, str(folder))
    yield "loop_hook_variants"
    sys.path.remove(str(folder))
    sys.modules.pop("loop_hook_variants", None)


@pytest.mark.parametrize("cls, name, loop, uses, others", [
    ("TrtllmGrantAll", "running_grant", "TrtllmLoop", "calls", "FastDeployLoop, VllmLoop"),
    ("TrtllmHeadVictim", "victim", "TrtllmLoop", "calls", "FastDeployLoop, VllmLoop"),
    ("SglangNoRunningExit", "running_checks_exit_rule", "SglangLoop", "reads", "FastDeployLoop, VllmLoop"),
    ("SglangGrantAll", "running_grant", "SglangLoop", "calls", "FastDeployLoop, VllmLoop"),
    ("SglangPads", "pads_short_admissions", "SglangLoop", "reads", "FastDeployLoop, TrtllmLoop, VllmLoop"),
])
def test_a_variant_of_a_hook_its_loop_never_uses_is_refused_at_load(variants, cls, name, loop, uses, others):
    with pytest.raises(ConfigError) as refused:
        get_policy(f"{variants}:{cls}")
    message = str(refused.value)
    assert "\n" not in message
    assert f"{name}, but {loop} never {uses} it" in message, message
    assert f"subclass a loop that {uses} it ({others})" in message, message


@pytest.mark.parametrize("command", [["check"], ["prove"]])
def test_a_one_pass_hook_on_sglangs_loop_is_one_error_line_exit_2(variants, command):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*command, "--policy", f"{variants}:SglangGrantAll"])
    message = err.getvalue()
    assert code == 2 and out.getvalue() == "" and message.count("\n") == 1, (code, out.getvalue(), message)
    assert "SglangGrantAll runs on SglangGrant, which overrides running_grant, but SglangLoop never calls it" in message
    assert "Traceback" not in message


def test_a_variant_of_a_hook_its_loop_uses_loads(variants):
    assert get_policy(f"{variants}:VllmHeadVictim").loop.__name__ == "HeadVictimVllm"
    assert get_policy(f"{variants}:TrtllmOwnPass").loop.__name__ == "OwnPass"  # it restates what its pass calls
