"""Policy exercises (the batching lab): graded by simulation in the judge, each decision asked of the runner."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autograder.labs import batching as engine
from test_autograder import autograder, gradebook

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "submissions" / "batching"
EXPECTED = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("batching")
    autograder("grade", "--lab", "batching", "--out", str(out), "--simulator", "--seed", "777", str(BANK))
    return out


def _feedback(out: Path, sub: str) -> str:
    tests = json.loads((out / sub / "results.json").read_text())["tests"]
    return "\n".join(t["output"] for t in tests)


@pytest.mark.parametrize("sub", sorted(EXPECTED))
def test_policy_bank(graded, sub):
    correctness, speed, phrase = EXPECTED[sub]
    tests = json.loads((graded / sub / "results.json").read_text())["tests"]
    scores = {t["extra_data"]["part"]: t["score"] for t in tests}
    assert scores["correctness"] == correctness, _feedback(graded, sub)
    if speed is not None:
        assert scores["speed"] == speed, _feedback(graded, sub)
    assert phrase in _feedback(graded, sub)


def test_grouping_by_length_earns_speed_points(graded):
    """Two length classes earn most of the speed points; FIFO and one at a time earn none."""
    def speed(sub):
        return next(t["score"] for t in json.loads((graded / sub / "results.json").read_text())["tests"]
                    if t["extra_data"]["part"] == "speed")
    assert speed("two_classes") >= 2 and speed("fifo") == speed("one_at_a_time") == 0


def _record(starts, sizes, served):
    return {"start": np.array(starts, float), "size": np.array(sizes), "served": np.array(served),
            "stop": np.array([])}


def test_parent_rejects_impossible_records():
    arrivals, tokens = np.array([0.0, 0.001, 0.002]), np.array([10, 10, 500])
    one = engine.batch_seconds([10])
    ok = _record([0.0, one, 2 * one], [1, 1, 1], [0, 1, 2])
    lat, problem = engine.latencies(arrivals, tokens, ok)
    assert problem == "" and np.all(np.isfinite(lat))
    cases = [
        (_record([0.0, 0.0005, 1.0], [1, 1, 1], [0, 1, 2]), "before the previous one ended"),
        (_record([0.0, 0.0], [2, 1], [0, 1, 2]), "before its requests arrived"),
        (_record([0.0, one, 2 * one], [1, 1, 1], [0, 0, 2]), "served twice"),
        (_record([0.0], [4], [0, 1, 2]), "malformed"),
        (_record([1.0], [3], [0, 1, 2]), ""),  # valid: 3 x 500 tokens is within MAX_TOKENS
    ]
    for record, words in cases:
        _, problem = engine.latencies(arrivals, tokens, record)
        assert words in problem, (record, problem)
    too_many = _record([1.0], [engine.MAX_BATCH + 1], list(range(engine.MAX_BATCH + 1)))
    big = np.zeros(engine.MAX_BATCH + 1)
    _, problem = engine.latencies(big, np.full(engine.MAX_BATCH + 1, 10), too_many)
    assert "limits" in problem


def test_early_stop_must_be_proved():
    """A record that stops early is accepted only when over 1% of requests already missed the bound."""
    n = 200
    arrivals, tokens = np.linspace(0, 0.1, n), np.full(n, 10)
    _, problem = engine.latencies(arrivals, tokens, {**_record([], [], []), "stop": np.array([0.05])})
    assert "stops before" in problem
    _, problem = engine.latencies(arrivals, tokens, {**_record([], [], []), "stop": np.array([10.0])})
    assert problem == ""


def test_forged_engine_in_the_worker_changes_nothing(graded):
    """The simulation runs in the judge: patching the runner's copy of the engine is moot."""
    def scores(sub):
        tests = json.loads((graded / sub / "results.json").read_text())["tests"]
        return [t["score"] for t in tests]
    assert scores("forged_costs") == scores("one_at_a_time")


def test_ratio_is_stable_across_seeds():
    """Grading is fair: the same policy's ratio to the reference moves little between secret seeds."""
    def one_at_a_time(waiting, now):
        return [0]

    ratios = []
    for seed in (1, 2, 3):
        rng = np.random.default_rng(seed)
        cases = [(p, engine._inputs(p, rng)) for p in engine._cases(True)]
        ratios.append(engine.assess(cases, [engine.simulate(one_at_a_time, p, i) for p, i in cases]).ratio)
    assert max(ratios) - min(ratios) < 0.08, ratios
