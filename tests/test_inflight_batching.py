"""Lab 17 (inflight_batching): a policy graded by simulation, as Lab 12's. The bank of
submissions grades as expected, the parent's replay rejects records the engine could not have
produced, and a policy's ratio to the reference is stable across secret seeds."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from autograder.labs import inflight_batching as engine
from test_autograder import autograder

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "submissions" / "inflight_batching"
EXPECTED = {k: v for k, v in json.loads((BANK / "expected.json").read_text()).items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("inflight_batching")
    autograder("grade", "--lab", "inflight_batching", "--out", str(out), "--simulator", "--seed", "777", str(BANK))
    return out


def _tests(out: Path, sub: str) -> list[dict]:
    return json.loads((out / sub / "results.json").read_text())["tests"]


def _feedback(out: Path, sub: str) -> str:
    return "\n".join(t["output"] for t in _tests(out, sub))


def _score(out: Path, sub: str, part: str) -> float:
    return next(t["score"] for t in _tests(out, sub) if t["extra_data"]["part"] == part)


def test_bank_is_complete():
    assert sorted(EXPECTED) == sorted(p.stem for p in BANK.glob("*.py"))


@pytest.mark.parametrize("sub", sorted(EXPECTED))
def test_policy_bank(graded, sub):
    correctness, speed, phrase = EXPECTED[sub]
    assert _score(graded, sub, "correctness") == correctness, _feedback(graded, sub)
    if speed is not None:
        assert _score(graded, sub, "speed") == speed, _feedback(graded, sub)
    assert phrase in _feedback(graded, sub)


def test_reserving_for_the_mean_answer_earns_part_of_the_speed_points(graded):
    """A reserve for answers that mostly never come costs batch size: partial speed points."""
    assert 0 < _score(graded, "reserves_mean", "speed") < 3, _feedback(graded, "reserves_mean")


def test_over_admitting_preempts_more_than_the_solution(graded):
    """Greedy admission keeps nothing back: it preempts more than a one-block-per-request reserve
    (preempting the newest request is cheap here, so it keeps most of its speed points)."""
    def preemptions(sub):  # from the case table: | trace 0 | pass | ..., 30 preemptions there (...) |
        found = re.findall(r"\| trace \d+ \| pass \|[^|\n]*?(\d+) preemptions there", _feedback(graded, sub))
        assert len(found) == len(engine._cases(True)), _feedback(graded, sub)
        return sum(map(int, found))
    assert preemptions("greedy") > preemptions("next_iteration_reserve"), _feedback(graded, "greedy")
    assert _score(graded, "greedy", "speed") >= 2


def _trace(n=60, rate=8.0, seed=0):
    return engine.trace(rate, n, np.random.default_rng(seed))


def test_replay_reproduces_a_run_and_rejects_forgeries():
    t = _trace()
    result = engine.run_trace(engine.reference_schedule, t["arrivals"], t["prompts"], t["outputs"], stop_late=1)
    record = result["record"]
    again, problem = engine.replay(t["arrivals"], t["prompts"], t["outputs"], record)
    assert problem == "" and np.array_equal(again["finish"], result["finish"])
    assert np.isfinite(result["finish"]).all()

    first = int(record["it"][0])
    forged = [
        ({**record, "admitted": np.where(record["admitted"] == record["admitted"][0], len(t["arrivals"]) - 1,
                                         record["admitted"])}, "not waiting"),  # a request that has not arrived
        ({**record, "size": record["size"][:-1]}, "malformed"),
        ({**record, "it": np.append(record["it"][:-1], 10 ** 9)}, "did not ask"),
    ]
    for rec, words in forged:
        _, problem = engine.replay(t["arrivals"], t["prompts"], t["outputs"], rec)
        assert words in problem, (words, problem)
    # Everything admitted at once, at the first iteration: over the engine's limits.
    everyone = {"it": np.array([first]), "size": np.array([len(t["arrivals"])]),
                "admitted": np.arange(len(t["arrivals"]))}
    _, problem = engine.replay(t["arrivals"], t["prompts"], t["outputs"], everyone)
    assert "breaks the engine's rules" in problem


def test_preemption_frees_the_newest_and_loses_its_tokens():
    """Two long answers in a pool that holds one: the second is preempted and starts over."""
    arrivals, prompts, outputs = np.array([0.0, 0.0]), np.array([16, 16]), np.array([200, 200])
    old = engine.NUM_BLOCKS
    try:
        engine.NUM_BLOCKS = engine.blocks_for(16 + 200, engine.BLOCK_SIZE) + 2
        result = engine.run_trace(lambda w, r, f, now: [0], arrivals, prompts, outputs, stop_late=1)
    finally:
        engine.NUM_BLOCKS = old
    assert result["preempted"].tolist()[0] == 0 and result["preempted"][1] >= 1
    assert result["finish"][1] > result["finish"][0]


def test_engine_refuses_answers_over_its_limits():
    t = _trace(n=20, rate=1000.0)
    with pytest.raises(ValueError, match="MAX_RUNNING|MAX_PREFILL_TOKENS|free"):
        engine.run_trace(lambda w, r, f, now: list(range(len(w))), t["arrivals"], t["prompts"], t["outputs"])
    with pytest.raises(IndexError, match="only"):
        engine.run_trace(lambda w, r, f, now: [len(w)], t["arrivals"], t["prompts"], t["outputs"])


def test_ratio_is_stable_across_seeds():
    """Grading is fair: a policy's ratio to the reference moves little between secret seeds."""
    def one_block_each(waiting, running, free_blocks, now):
        return [k for k in engine.reference_schedule(waiting, running, free_blocks + engine.WATERMARK - len(running), now)]

    ratios = []
    for seed in (1, 2, 3):
        rng = np.random.default_rng(seed)
        cases = [(p, engine._inputs(p, rng)) for p in engine._cases(True)]
        ratios.append(engine.assess(cases, [engine.simulate(one_block_each, p, i) for p, i in cases]).ratio)
    assert max(ratios) - min(ratios) < 0.15, ratios
    assert min(ratios) >= 0.95, ratios  # the solution's policy: full speed points on any seed
