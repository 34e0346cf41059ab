"""Quality of the tools: every planted bug of ``catalogue.BUGS`` is caught by the fuzzer under
the active Hypothesis profile (``pytest --hypothesis-profile=ci`` in CI: derandomized), and
the same run on the correct code catches nothing, so each catch is the bug's own; the bugs
with a ``proof`` entry flip those obligations from proved (the manifest) to refuted.

A run stops at the first failure and is not shrunk: the test asks whether the bug is
found, not for its minimal trace. A bug gets CATCH_EXAMPLES examples, the margin over
the profile's own count that keeps a deterministic catch from hanging on the last few.
"""
from __future__ import annotations

import pytest
from catalogue import BUGS, FUZZ, PROOF, PlantedBug
from proof_budgets import GENEROUS
from hypothesis import Phase, settings

from tokenbudget.fuzz.config_strategies import configs
from tokenbudget.fuzz.failures import FuzzFailure
from tokenbudget.fuzz.machine import FuzzStats, machine_class
from tokenbudget.fuzz.session import run_machine
from tokenbudget.model import get_policy
from tokenbudget.proofs import manifest
from tokenbudget.proofs.prove import prove
from tokenbudget.proofs.verdicts import PROVED, REFUTED

pytestmark = pytest.mark.quality

CATCH_EXAMPLES = 500
PHASES = (Phase.explicit, Phase.generate)


def fuzz_once(bug: PlantedBug, examples: int) -> FuzzFailure | None:
    """The first failure the fuzzer raises on the bug's policy and clean configs, if any."""
    pol = get_policy(bug.policy)
    cls = machine_class(bug.policy, pol, config_strategy=configs(pol).filter(bug.configs(pol)))
    cls.stats = FuzzStats()
    cls.known = bug.ignored
    return run_machine(cls, examples, 0, PHASES, parent=settings.default)


@pytest.mark.parametrize("bug", BUGS, ids=lambda bug: bug.name)
def test_the_fuzzer_catches_the_planted_bug(bug: PlantedBug, monkeypatch: pytest.MonkeyPatch) -> None:
    bug.patch(monkeypatch)
    found = fuzz_once(bug, CATCH_EXAMPLES)
    assert found is not None, f"{bug.name} ({bug.description}) was not caught"
    assert found.kind in bug.caught_by[FUZZ], f"{bug.name} was caught as {found.kind}: {found}"


CONTROLS = {(bug.policy, bug.scheduling, bug.user_t): bug for bug in BUGS}


@pytest.mark.parametrize("bug", CONTROLS.values(), ids=lambda bug: f"{bug.policy}-{bug.scheduling}")
def test_the_correct_code_is_not_flagged_on_the_same_configs(bug: PlantedBug) -> None:
    found = fuzz_once(bug, settings.default.max_examples)
    assert found is None, f"{bug.policy} was flagged without a planted bug on {bug.name}'s configs: {found}"


@pytest.mark.parametrize("bug", [b for b in BUGS if PROOF in b.caught_by], ids=lambda bug: bug.name)
def test_the_prover_catches_the_planted_bug(bug: PlantedBug, monkeypatch: pytest.MonkeyPatch) -> None:
    obligations = sorted(bug.caught_by[PROOF])
    recorded = manifest.load()[bug.policy]
    assert all(recorded[name].verdict == PROVED for name in obligations), "the correct policy proves them"
    bug.patch(monkeypatch)
    outcomes = prove([bug.policy], GENEROUS, obligations, jobs=1)  # each refutation's trace replays (search.verify)
    assert {o.obligation: o.verdict for o in outcomes} == {name: REFUTED for name in obligations}
