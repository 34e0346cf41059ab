"""The cost models: the roofline file and its sources, NNLS fitting, the measured table."""
from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tokenbudget.whatif import cost_file
from tokenbudget.whatif.cost_fitted import TERMS, FittedCost, fit, projected_nnls
from tokenbudget.whatif.cost_roofline import ACCELERATOR_KEYS, MODEL_KEYS, RooflineCost
from tokenbudget.whatif.cost_table import TableCost
from tokenbudget.whatif.step_shape import CACHED_KEYS, StepShape


def shapes(n: int, seed: int = 0) -> list[StepShape]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        prefill, verify, seqs = (int(x) for x in rng.integers([0, 0, 1], [2048, 256, 32]))
        out.append(StepShape(prefill, verify, int(rng.integers(0, 4_000_000)), seqs, 0, int(rng.integers(1, 50_000)), int(rng.integers(0, 4_000_000)), int(rng.integers(0, seqs + 1)),
                              int(rng.integers(0, 2_000_000))))
    return out


def test_every_shipped_roofline_number_names_its_source():
    for name in cost_file.shipped():
        doc = json.loads((cost_file.SHIPPED / f"{name}.json").read_text())
        if doc["kind"] == "roofline":
            for section, keys in (("model", MODEL_KEYS), ("accelerator", ACCELERATOR_KEYS)):
                assert all(doc[section][k]["source"].strip() for k in keys), (name, section)


def test_every_shipped_cost_model_loads_and_prices_a_step():
    for name in cost_file.shipped():
        assert cost_file.load(Path(name)).step_seconds(StepShape(64, 0, 64 * 1000 + 2080, 1, 0, 1064, 4096, 0, 64 * 40)) > 0


def test_a_roofline_number_without_its_source_is_refused(tmp_path: Path):
    doc = json.loads((cost_file.SHIPPED / "kimi-k2-h100x8.json").read_text())
    doc["model"]["num_layers"] = {"value": 61}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(cost_file.CostFileError, match="model.num_layers"):
        cost_file.load(path)


def test_the_roofline_is_memory_bound_for_a_decode_and_compute_bound_for_a_long_prefill():
    cost = cost_file.load(Path("kimi-k2-h100x8"))
    assert isinstance(cost, RooflineCost)
    decode, prefill = StepShape(0, 8, 8 * 4000, 1, 6, 4000), StepShape(8192, 0, 8192 * 8193 // 2, 1, 6, 8192)
    m, a = cost.model, cost.accelerator
    weights_s = (m["dense_params"] + m["expert_params"]) * m["bytes_per_param"] / (
        a["count"] * a["memory_bandwidth"] * a["bandwidth_efficiency"])
    assert cost.step_seconds(decode) < weights_s  # 8 tokens touch a fraction of the experts
    assert cost.step_seconds(prefill) > weights_s + a["per_step_s"]  # compute exceeds streaming every weight
    assert cost.step_seconds(StepShape(0, 16, 16 * 4000, 2, 12, 8000)) > cost.step_seconds(decode)


def test_nnls_fit_recovers_the_coefficients_of_exact_data():
    truth = dict(zip(TERMS, (2e-3, 1e-5, 3e-5, 1e-9, 4e-4, 2e-8, 3e-9, 5e-4, 1e-3, 4e-9)))
    model = FittedCost(truth, {})
    steps = shapes(60)
    fitted = fit(steps, [model.step_seconds(s) for s in steps], {"what": "exact"})
    for term in TERMS:
        assert fitted.coefficients[term] == pytest.approx(truth[term], rel=1e-4, abs=1e-12)
    assert fitted.source == {"what": "exact"}


def test_the_fit_finds_attention_that_costs_more_past_the_cached_keys():
    # Steps of lone prompt chunks (grant g at context c) whose pairs past 1024 keys cost twice the others.
    steps, seconds = [], []
    for g, c in itertools.product((16, 64, 128, 250), range(0, 1800, 150)):
        past = g * max(0, c + g - CACHED_KEYS)
        steps.append(StepShape(g, 0, g * c + g * (g + 1) // 2, 1, 0, c + g, g * g, 0, past))
        seconds.append(1e-3 + 4e-5 * g + 1e-7 * (g * c + g * (g + 1) // 2) + 1e-7 * past)
    fitted = fit(steps, seconds, {})
    assert fitted.coefficients["per_pairs_past_cached_keys_s"] == pytest.approx(1e-7, rel=1e-3)
    assert fitted.coefficients["per_token_context_s"] == pytest.approx(1e-7, rel=1e-3)


def test_nnls_keeps_coefficients_non_negative():
    steps = shapes(40, seed=1)
    seconds = [1e-3 + 1e-5 * s.prefill_tokens - 1e-7 * s.num_seqs for s in steps]  # a negative true term
    fitted = fit(steps, seconds, {})
    assert all(v >= 0 for v in fitted.coefficients.values())


def _nnls_by_enumeration(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NNLS by trying every support: least squares on each subset of columns, the best feasible."""
    best, best_residual = np.zeros(a.shape[1]), float(np.linalg.norm(b))
    for mask in itertools.product([False, True], repeat=a.shape[1]):
        if any(mask):
            x = np.zeros(a.shape[1])
            x[list(mask)] = np.linalg.lstsq(a[:, list(mask)], b, rcond=None)[0]
            if (x >= -1e-12).all() and np.linalg.norm(a @ x - b) < best_residual - 1e-12:
                best, best_residual = np.maximum(x, 0), float(np.linalg.norm(a @ x - b))
    return best


def test_the_projected_solver_solves_nnls():
    rng = np.random.default_rng(2)
    a, b = rng.random((30, 5)), rng.random(30) - 0.2
    assert projected_nnls(a, b, iterations=200000) == pytest.approx(_nnls_by_enumeration(a, b), abs=1e-5)


def test_a_fit_needs_as_many_steps_as_terms():
    with pytest.raises(ValueError, match="at least"):
        fit(shapes(3), [1.0, 1.0, 1.0], {})


def test_the_table_returns_measured_steps_exactly_and_interpolates_between():
    a, b = StepShape(100, 0, 5050, 1, 0, 100, 10**4, 1), StepShape(1000, 0, 500500, 1, 0, 1000, 10**6, 1)
    table = TableCost((((a.features()), 0.01), ((b.features()), 0.05)), {"what": "two steps"})
    assert table.step_seconds(a) == 0.01 and table.step_seconds(b) == 0.05
    assert 0.01 < table.step_seconds(StepShape(400, 0, 80200, 1, 0, 400, 160000, 1)) < 0.05


@pytest.mark.parametrize("cost", [
    FittedCost(dict(zip(TERMS, (1e-3, 2e-5, 0, 1e-9, 0, 1e-8, 0, 1e-4, 2e-3, 2e-9))), {"what": "f"}),
    TableCost((((1, 0, 1, 1, 1, 1, 1, 1, 0), 0.5),), {"what": "t"}),
])
def test_a_cost_model_file_round_trips(tmp_path: Path, cost):
    path = tmp_path / "cost.json"
    cost_file.save(cost, path)
    again = cost_file.load(path)
    assert again == cost and again.to_dict() == cost.to_dict()


@pytest.mark.parametrize("text, named", [("{", "not JSON"), ('{"kind": "magic"}', "kind must be"),
                                         ('{"kind": "fitted", "coefficients": {}}', "lacks or garbles")])
def test_a_bad_cost_file_is_named(tmp_path: Path, text, named):
    path = tmp_path / "cost.json"
    path.write_text(text)
    with pytest.raises(cost_file.CostFileError, match=named):
        cost_file.load(path)


def test_without_scipy_the_fit_uses_the_projected_solver(monkeypatch):
    truth = dict(zip(TERMS, (2e-3, 1e-5, 3e-5, 1e-9, 4e-4, 2e-8, 3e-9, 5e-4, 1e-3, 4e-9)))
    steps = shapes(60)
    seconds = [FittedCost(truth, {}).step_seconds(s) for s in steps]
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)  # its import now raises ImportError
    fitted = fit(steps, seconds, {})
    predicted = np.array([fitted.step_seconds(s) for s in steps])
    assert predicted == pytest.approx(np.array(seconds), rel=1e-3)
