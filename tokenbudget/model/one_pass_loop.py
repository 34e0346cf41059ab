"""OnePassLoop: the loop of an engine whose step is one pass, the running requests then the
waiting ones, and the hooks and flags a loop variant changes it by."""
from __future__ import annotations

from typing import Any, ClassVar, Optional, Sequence

from ..spec import grant_rules
from ..spec.intlike import BoolLike, IntLike, ite
from . import decisions
from .loop import SchedulerLoop
from .physical_need import builtin_class
from .policy import BudgetParams, BudgetPolicy, Budgets
from .request import Request, Status
from .step_pass import StepPass

HOOKS = ("running_grant", "admission", "victim", "cursor_after_preemption")  # a loop variant's classmethods
VARIANT_FLAGS = ("running_checks_exit_rule", "waiting_checks_exit_rule", "unschedules_refunded")  # and its flags
# The engine's facts about its pass that only the one-pass step and its skeleton read
ENGINE_FLAGS = ("pads_short_admissions", "decodes_bypass_budget", "applies_long_prefill_threshold")


def ignored_overrides(loop: type[SchedulerLoop]) -> list[tuple[str, type[SchedulerLoop]]]:
    """The hooks ``loop`` overrides and the flags it sets that its step never calls or reads,
    each with the loop that says so: for a ``OnePassLoop``, the loop that declares ``honours``
    (the nearest in its bases, itself when it restates it) and the hooks and variant flags
    outside that declaration; for another loop, the engine loop it derives from (the nearest
    the model defines), whose step is its own and uses none of them."""
    if issubclass(loop, OnePassLoop):
        declarer: type[SchedulerLoop] = next(c for c in loop.__mro__ if "honours" in vars(c))
        honoured: frozenset[str] = declarer.honours  # type: ignore[attr-defined]
        flags = VARIANT_FLAGS
    else:
        declarer, honoured, flags = builtin_class(loop), frozenset(), VARIANT_FLAGS + ENGINE_FLAGS
    changed = [hook for hook in HOOKS if _function(loop, hook) is not _function(declarer, hook)]
    changed += [flag for flag in flags if getattr(loop, flag, None) != getattr(declarer, flag, None)]
    return [(name, declarer) for name in changed if name not in honoured]


def _function(cls: type, name: str) -> Any:
    """The function behind ``cls.name`` (a classmethod's own function), None when there is none."""
    attr = getattr(cls, name, None)
    return getattr(attr, "__func__", attr)


class OnePassLoop(SchedulerLoop):
    """A step of one running pass and one waiting pass; subclasses supply the running pass
    and ``_progress_possible``."""

    # The pass's control flow, as the prover's pass skeleton follows it; each loop sets the first two.
    pads_short_admissions: ClassVar[bool]  # a 1-token admission is padded to 1 + k
    decodes_bypass_budget: ClassVar[bool]  # an unvisited decode still runs, on the KV blocks it holds
    applies_long_prefill_threshold: ClassVar[bool] = True  # the engine reads long_prefill_token_threshold
    running_checks_exit_rule: ClassVar[bool] = True  # the running pass stops when the policy's exit rule says so
    waiting_checks_exit_rule: ClassVar[bool] = True  # the waiting pass admits only while the exit rule lets it
    unschedules_refunded: ClassVar[bool] = True  # a same-step preemption takes the victim's grant off the step too
    # The pass skeleton follows this loop's step; False for a loop whose step has passes of its own
    # (then the prover judges it by the bounded trace search over the model, ``proofs/loop_search.py``).
    skeleton_follows: ClassVar[bool] = True
    # The hooks and variant flags this loop's step calls or reads, declared once per loop
    # (``tests/integration/test_loop_hooks.py`` runs each loop and holds it to this); a variant
    # that changes one outside it is refused when it loads (``ignored_overrides``).
    honours: ClassVar[frozenset[str]] = frozenset(HOOKS + VARIANT_FLAGS)

    # -- the hooks of a loop variant (IntLike: the pass skeleton calls them on z3 terms) ---
    @classmethod
    def running_grant(cls, policy: BudgetPolicy, p: BudgetParams, budgets: Budgets, demand: IntLike,
                      computed: IntLike, threshold: IntLike, max_model_len: IntLike, bypass: BoolLike) -> IntLike:
        """Tokens for a running request that wants ``demand`` (<= 0: skip it and go on): the
        threshold, then the policy's grant, then the clip to max_model_len (``decisions.running_grant``)."""
        return decisions.running_grant(policy, p, budgets, demand, computed, threshold, max_model_len, bypass)

    @classmethod
    def admission(cls, policy: BudgetPolicy, p: BudgetParams, budgets: Budgets, demand: IntLike, computed: IntLike,
                  threshold: IntLike, max_model_len: IntLike, k: IntLike, prefill_scheduled: BoolLike,
                  running_scheduled: BoolLike, chunked_prefill: BoolLike) -> decisions.Admission:
        """The decision for the head of the waiting queue: padding (when ``pads_short_admissions``)
        and its max_model_len gate, then the threshold, then the policy (``decisions.admission``)."""
        return decisions.admission(policy, p, budgets, demand, computed, threshold, max_model_len, k,
                                   cls.pads_short_admissions, prefill_scheduled, running_scheduled, chunked_prefill)

    @classmethod
    def victim(cls, priority_scheduling: BoolLike, running: Sequence[BoolLike], priority: Sequence[IntLike],
               arrival: Sequence[IntLike]) -> list[BoolLike]:
        """One-hot over the running queue: the request preempted when an allocation fails
        (``decisions.victim``); all False when none runs."""
        return decisions.victim(priority_scheduling, running, priority, arrival)  # type: ignore[no-any-return]

    @classmethod
    def cursor_after_preemption(cls, index: IntLike, victim_index: IntLike) -> IntLike:
        """The running pass's cursor (``index``, the request being scheduled) after the
        victim at ``victim_index`` left the running queue: one back when it stood before."""
        return ite(victim_index < index, index - 1, index)

    @classmethod
    def structure_changes(cls) -> list[str]:
        """The flags and hooks of the pass's structure this loop changes from the shared
        loop's (the prover's induction assumes none of them changed)."""
        out = [name for name in VARIANT_FLAGS if not getattr(cls, name)]
        for name in ("victim", "cursor_after_preemption"):
            if getattr(cls, name).__func__ is not getattr(OnePassLoop, name).__func__:
                out.append(name)
        return out

    # -- the pass -------------------------------------------------------------------
    def _schedule_step(self, step: StepPass) -> None:
        """The running pass, then (unless it preempted) the waiting pass, under the
        long-prefill threshold when the engine reads it and more than one request is eligible."""
        applies = len(self.running) + len(self.waiting) > 1 and self.reads_long_prefill_threshold()
        threshold = self.cfg.long_prefill_token_threshold if applies else 0
        self._schedule_running(step, threshold)
        if not step.preempted:
            self._schedule_waiting(step, threshold)

    def reads_long_prefill_threshold(self) -> bool:
        """Whether this step's pass reads ``long_prefill_token_threshold`` (when more than one
        request is eligible): the loop's flag, unless its engine version says otherwise."""
        return self.applies_long_prefill_threshold

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        """The running pass: grant running requests in queue order (``_grant_running``)."""
        raise NotImplementedError

    def _pick_victim(self) -> Request:
        """The running request to preempt when an allocation fails (``victim``)."""
        running = self.running
        onehot = self.victim(self.cfg.scheduling_policy == "priority", [True] * len(running),
                             [r.priority for r in running], [r.arrival for r in running])
        return running[onehot.index(True)]

    def _grant_running(self, step: StepPass, index: int, grant: int, num_drafts: int, kv_tokens: int) -> Optional[int]:
        """Allocate KV for running request ``index`` to run ``kv_tokens`` more, preempting
        victims (refunding a victim granted earlier in the pass) until it fits, and record
        its grant. Returns the index of the next request to visit, or None when the request
        preempted itself (the running pass ends)."""
        req = self.running[index]
        computed = req.num_computed_tokens
        slots = grant_rules.kv_slots_needed(computed, kv_tokens, self.lookahead, self._kv_len_cap)
        while not self.pool.allocate(req, slots, []):
            victim = self._pick_victim()
            victim_index = self.running.index(victim)
            del self.running[victim_index]
            index = int(self.cursor_after_preemption(index, victim_index))
            if victim.request_id in step.grants:
                step.record_refund(victim, unschedule=self.unschedules_refunded)
                if self.unschedules_refunded:
                    step.scheduled_running.remove(victim)
            self._preempt(victim)
            step.preempted.append(victim.request_id)
            if victim is req:
                return None
        self.pool.cache_full_blocks(req, min(computed + grant, req.num_tokens))
        step.record_grant(req, grant, num_drafts, padded=False)
        step.scheduled_running.append(req)
        step.prefill_scheduled |= req.is_prefill_chunk  # vLLM never clears it, even on a refund
        return index + 1

    def _schedule_waiting(self, step: StepPass, threshold: int) -> None:
        """The waiting pass: admit the head of the queue while the exit rule, the sequence
        cap, the admission decision and the KV pool let it; stop at the first that cannot."""
        policy, cfg, k = self.policy, self.cfg, self.k
        while self.waiting and (step.may_schedule() or not self.waiting_checks_exit_rule):
            if len(self.running) >= self._admission_seq_cap():
                break
            req = self.waiting[0]
            hits = self.pool.find_cached_prefix(req) if req.num_computed_tokens == 0 else []
            computed = req.num_computed_tokens + len(hits) * cfg.block_size
            decision = self.admission(
                policy, self.params, step.budgets, req.num_tokens - computed, computed, threshold,
                cfg.max_model_len, k, step.prefill_scheduled, bool(step.scheduled_running),
                self.params.enable_chunked_prefill,
            )
            if decision.stop:
                break
            grant = decision.grant
            assert grant > 0, f"waiting loop granted {grant} with budgets {step.budgets}"
            slots = grant_rules.kv_slots_needed(computed, self._admission_kv_tokens(req, computed, grant),
                                                self.lookahead, self._kv_len_cap)
            if not self._whole_sequence_fits(req, hits) or not self.pool.allocate(req, slots, hits):
                break
            del self.waiting[0]
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = computed
            self.pool.cache_full_blocks(req, min(computed + grant, req.num_tokens))
            step.record_grant(req, grant, k if decision.padded else 0, decision.padded)

    @property
    def _kv_len_cap(self) -> int:
        """The most KV slots a request holds: max_model_len, unless the engine's KV tables hold more."""
        return self.cfg.max_model_len

    def _admission_kv_tokens(self, req: Request, computed: int, grant: int) -> int:
        """Tokens past ``computed`` an admitted request gets KV for: its grant, unless the engine
        allocates more at admission."""
        return grant

    def _admission_seq_cap(self) -> int:
        """The most requests the waiting pass lets run: max_num_seqs, unless the engine caps it."""
        return self.cfg.max_num_seqs

    def _whole_sequence_fits(self, req: Request, hits: list[int]) -> bool:
        """The admission gate, vLLM's ``scheduler_reserve_full_isl`` (on by default, and
        shared by the FastDeploy model: SPEC.md §5): a waiting request is admitted only if
        the free blocks could hold its whole sequence so far (prompt and outputs, at most
        max_model_len), not only its first chunk."""
        whole = min(req.num_tokens, self.cfg.max_model_len)
        return self.pool.blocks_needed(req, whole, hits) <= self.pool.num_free

    def _room_for_a_token(self, admit: bool) -> bool:
        """Could the KV pool give some request one more token: a running one, or (when
        ``admit``, a budget and a sequence slot being left) the head of the waiting queue?"""
        free, cfg = self.pool.num_free, self.cfg
        for req in self.running:
            if req.num_computed_tokens + 1 >= cfg.max_model_len:
                continue
            slots = grant_rules.kv_slots_needed(req.num_computed_tokens, 1, self.lookahead, self._kv_len_cap)
            if self.pool.blocks_needed(req, slots, []) <= free:
                return True
        if self.waiting and len(self.running) < self._admission_seq_cap() and admit:
            req = self.waiting[0]
            hits = self.pool.find_cached_prefix(req)
            slots = grant_rules.kv_slots_needed(len(hits) * cfg.block_size, 1, self.lookahead, self._kv_len_cap)
            return self.pool.blocks_needed(req, slots, hits) <= free and self._whole_sequence_fits(req, hits)
