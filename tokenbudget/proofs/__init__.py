"""Proofs over the model's own code (z3, CrossHair) and the verdict manifest.

Every module runs the model's budget functions on z3 terms (ARCHITECTURE.md: rules are
written once); nothing of a policy is encoded twice.

- ``symbolic``: symbolic configs, the policy's own ``params`` and ``requirements`` on them.
- ``induction``: unbounded proofs of the ledger invariants (and of ``model-len`` and
  ``spec-shape`` at every grant) by induction over the ledger points of a pass.
- ``pass_skeleton``: the prover's loop skeleton, one pass over N request slots;
  ``bounded_pass`` runs it from any state (bounded proofs), ``trace_family`` from an empty
  system over a few steps (replayable counterexamples), ``violations`` states the step
  invariants on it.
- ``trace_search``: minimal counterexamples (``solving.minimise``), written as traces and replayed.
- ``obligations``, ``configs``, ``efficiency``: what is decided for each policy, and how.
- ``prove``: decide, judge and emit every obligation of a policy; ``manifest``: the recorded verdicts.
- ``symbolic_branch``: a user's Python ``if``/``and``/``max`` on a z3 term, named as one error line.
- ``contracts``: the CrossHair contracts and the planted bugs they catch.
"""
