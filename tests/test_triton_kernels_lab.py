"""Lab 18 (triton_kernels): its reference kernels (course/triton_kernels.py) pass the lab's own
cases, and its tolerance catches what its prompts say it catches. Without a GPU the references
run in Triton's interpreter on the simulator's cases; on a GPU, autotuned, on the GPU's cases."""
from __future__ import annotations

import os

import numpy as np
import pytest

from autograder.labs import get_lab
from autograder.measure import compare

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

GPU = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")  # the root conftest decides
LAB = get_lab("triton_kernels")


def _run(ex, fn, params, inputs: dict) -> dict:
    """``fn`` on torch tensors of ``inputs`` and of NaN-filled outputs; the outputs, on the host."""
    device = "cuda" if GPU else "cpu"
    arrays = dict(inputs, **{n: np.full(spec.shape(params), np.nan, dtype=spec.dtype) for n, spec in ex.outputs.items()})
    tensors = {n: torch.from_numpy(v).to(device) for n, v in arrays.items()}
    fn(*(tensors[a] for a in ex.args))
    return {n: tensors[n].cpu().numpy() for n in ex.outputs}


@pytest.mark.parametrize("name", [e.name for e in LAB.exercises])
def test_the_reference_passes_every_case(name):
    ex = LAB.exercise(name)
    rng = np.random.default_rng(18)
    for params in ex.cases(not GPU):
        inputs = ex.inputs(params, rng)
        outputs = _run(ex, ex.baseline, params, inputs)
        res = compare(ex, params, inputs, outputs, inputs)
        assert res.passed, (params, res.message)


def _tiled_product(a, b, tile: int, accumulate) -> np.ndarray:
    """a @ b over tiles of K of ``tile``, each tile's product in float32, then ``accumulate``."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], tile):
        acc = accumulate(acc, a[:, k0:k0 + tile].astype(np.float32) @ b[k0:k0 + tile].astype(np.float32))
    return acc.astype(np.float16)


def _case(ex, m, n, k):
    params = {"m": m, "n": n, "k": k}
    return params, ex.inputs(params, np.random.default_rng(3))


def test_the_tolerance_passes_float32_sums_and_fails_a_float16_accumulator_at_k_130():
    ex = LAB.exercise("matmul")
    params, inputs = _case(ex, 100, 70, 130)
    assert params in ex.cases(True)  # the case the prompt names is one the interpreter runs
    a, b = inputs["a"], inputs["b"]
    good = _tiled_product(a, b, 32, lambda acc, p: acc + p)
    half = _tiled_product(a, b, 32, lambda acc, p: (acc + p).astype(np.float16).astype(np.float32))
    assert compare(ex, params, inputs, {"c": good}, inputs).passed
    res = compare(ex, params, inputs, {"c": half}, inputs)
    assert not res.passed, "a float16 accumulator passed at K = 130"


def test_a_product_that_drops_the_last_partial_tile_of_k_fails():
    ex = LAB.exercise("matmul")
    params, inputs = _case(ex, 70, 50, 45)
    a, b = inputs["a"], inputs["b"]
    dropped = (a[:, :32].astype(np.float32) @ b[:32].astype(np.float32)).astype(np.float16)  # 13 of 45 left out
    assert not compare(ex, params, inputs, {"c": dropped}, inputs).passed


def test_the_gelu_reference_is_torchs_tanh_form():
    from autograder.labs.triton_kernels import gelu_tanh64

    z = np.linspace(-12.0, 12.0, 2001)
    want = torch.nn.functional.gelu(torch.from_numpy(z), approximate="tanh").numpy()
    np.testing.assert_allclose(gelu_tanh64(z), want, rtol=1e-12, atol=1e-15)


def test_honest_mistakes_are_named_for_what_they_are(tmp_path):
    """tests/submissions/triton_kernels: a product whose K-tiles are loaded without their mask along K
    is named as a read past the end of a's dimension 1 (K), at its line, not as output never written."""
    import json
    import shutil
    import sys
    from pathlib import Path

    from autograder.results import md_unescape

    root = Path(__file__).resolve().parent.parent
    bank = root / "tests" / "submissions" / "triton_kernels"
    expected = {k: v for k, v in json.loads((bank / "expected.json").read_text()).items() if not k.startswith("_")}
    sys.path.insert(0, str(root / "tests"))
    from test_autograder import autograder

    subs = tmp_path / "subs"
    subs.mkdir()
    for name in expected:
        shutil.copy(bank / f"{name}.py", subs / f"{name}.py")
    exercises = sorted({e for want in expected.values() for e in want["scores"]})
    out = tmp_path / "out"
    autograder("grade", "--lab", "triton_kernels", "--out", out, "--simulator",
               *(a for e in exercises for a in ("--exercise", e)), subs)
    problems = []
    for name, want in expected.items():
        tests = json.loads((out / name / "results.json").read_text())["tests"]
        for exercise, points in want["scores"].items():
            mine = [t for t in tests if t["extra_data"]["exercise"] == exercise]
            said = md_unescape("\n".join(t["output"] for t in mine))
            if sum(t["score"] for t in mine) != points:
                problems.append(f"{name}: {exercise} scored {sum(t['score'] for t in mine)}, expected {points}")
            problems += [f"{name}: {exercise}'s feedback lacks {w!r}: {said[:500]!r}"
                         for w in want.get("words", {}).get(exercise, []) if w not in said]
            problems += [f"{name}: {exercise}'s feedback says {w!r}: {said[:500]!r}"
                         for w in want.get("never", {}).get(exercise, []) if w in said]
    assert not problems, "\n".join(problems)
