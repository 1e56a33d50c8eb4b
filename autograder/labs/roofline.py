"""Lab 4: roofline. A fused memory-bound kernel that should run near the copy bandwidth, a
compute-bound ensemble of oscillators whose speed is set by float32 arithmetic, a chain of
elementwise operations fused into one CuPy kernel, and (stretch) Horner's rule in CUDA C."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..spec import CUPY_ARRAY_COPIES, Exercise, Lab, NO_HOST_MATH, Out, SCALARS, Speed, awkward_1d, uniform

# The CuPy exercises: one kernel of your own (raw or elementwise), no CuPy array maths or cupy.fuse.
CUPY_KERNEL_ONLY = ("cupy.*", "!cupy.ElementwiseKernel", "!cupy.RawKernel", "!cupy.RawModule",
                    "!cupy.cuda", "!cupy.cuda.*", "!cupy.float32", "!cupy.int32", "!cupy.int64",
                    "numpy.*", "torch.*") + CUPY_ARRAY_COPIES + SCALARS

LARGE = 10_000_019  # large and odd: no power-of-two grid covers it exactly (40 MB of float32)

# Exercise 2: RK4 steps of the undamped Duffing oscillator u'' = -u - u^3.
H = 0.01  # the step size
# FLOPs per RK4 step, counting each multiply and add (an FMA is 2): four forces
# -(w + w*w*w) at 3 each, six stage arguments at 2 each, and for u and v the weighted sum
# k1 + 2 k2 + 2 k3 + k4 (5) scaled and added (2).
RK4_FLOPS = 4 * 3 + 6 * 2 + 2 * (5 + 2)

# Exercise 3: GELU, tanh approximation (Hendrycks and Gimpel, 2016).
GELU_C = 0.7978845608028654  # sqrt(2 / pi)
GELU_A = 0.044715


def _vec(n):
    return (n,)


# --------------------------------------------------------------------------- 1. axpby + clamp
def _axpby_inputs(p, rng):
    n = p["n"]
    x, y = uniform(rng, n), uniform(rng, n)
    # float32-exact scalars, so converting them to float32 in a kernel loses nothing
    a, b = (float(np.float32(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 2.0))) for _ in range(2))
    r = a * x.astype(np.float64) + b * y.astype(np.float64)
    lo, hi = (float(np.float32(q)) for q in np.quantile(r, [0.1, 0.9]))  # about 20% clamped
    return {"x": x, "y": y, "a": a, "b": b, "lo": lo, "hi": hi}


def _axpby_reference(x, y, a, b, lo, hi):
    r = a * np.asarray(x, dtype=np.float64) + b * np.asarray(y, dtype=np.float64)
    return {"out": np.minimum(np.maximum(r, lo), hi)}


# --------------------------------------------------------------------------- 2. oscillators
def _force(u):
    return -(u + u * u * u)


def rk4_duffing(u0, steps):
    """Final positions after ``steps`` RK4 steps of u'' = -u - u^3 from (u0, 0), in float64."""
    u = np.array(u0, dtype=np.float64)
    v = np.zeros_like(u)
    h = H
    for _ in range(steps):
        a1, b1 = v, _force(u)
        a2, b2 = v + h / 2 * b1, _force(u + h / 2 * a1)
        a3, b3 = v + h / 2 * b2, _force(u + h / 2 * a2)
        a4, b4 = v + h * b3, _force(u + h * a3)
        u = u + h / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
        v = v + h / 6 * (b1 + 2 * b2 + 2 * b3 + b4)
    return u


def _osc_cases(sim: bool) -> list[dict]:
    if sim:
        return [dict(c, steps=4) for c in awkward_1d(True, 0, large_sim=2003)] + [{"n": 100, "steps": 0}]
    cases = [dict(c, steps=256) for c in awkward_1d(False, 100_003)]
    return cases + [{"n": 1000, "steps": 1}, {"n": 100, "steps": 0}, {"n": 4099, "steps": 1024}]


def _osc_inputs(p, rng):
    # Positions in [-2, 2]: the grader's timing may scale inputs by up to 8, and RK4 with
    # h = 0.01 stays stable and accurate for amplitudes far beyond 16.
    return {"u0": rng.uniform(-2.0, 2.0, p["n"]).astype(np.float32), "steps": p["steps"]}


# --------------------------------------------------------------------------- 3. GELU
def _gelu_inputs(p, rng):
    n = p["n"]
    x = (rng.uniform(-1.0, 1.0) + 10.0 ** rng.uniform(-0.3, 0.7) * rng.standard_normal(n)).astype(np.float32)
    # One positive element, so no case lies wholly in the far negative tail, where GELU is tiny
    # and float32 keeps only a few correct digits of it (1 + tanh(z) cancels).
    x[0] = abs(x[0]) + np.float32(0.5)
    return {"x": x}


def gelu64(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + GELU_A * x * x * x)))


# --------------------------------------------------------------------------- 4. Horner
def _horner_cases(sim: bool) -> list[dict]:
    cases = [dict(c, m=64) for c in awkward_1d(sim, 100_003, large_sim=2003)]
    return cases + [{"n": 1000, "m": 1}, {"n": 1025, "m": 2}, {"n": 4099 if sim else 100_003, "m": 513}]


def _horner_inputs(p, rng):
    x = rng.uniform(-1.25, 1.25, p["n"]).astype(np.float32)  # about a fifth outside [-1, 1]
    return {"x": x, "coeffs": uniform(rng, p["m"])}


def horner64(x, coeffs):
    t = np.clip(np.asarray(x, dtype=np.float64), -1.0, 1.0)
    c = np.asarray(coeffs, dtype=np.float64)
    acc = np.full_like(t, c[-1])
    for k in range(c.size - 2, -1, -1):
        acc = acc * t + c[k]
    return acc


# --------------------------------------------------------------------------- baselines
@lru_cache(maxsize=None)
def _numba_baselines():
    """Reference kernels, built in the reference runner on first use (never at import time)."""
    global cuda  # a module global, not a closure: the CUDA simulator swaps the global named cuda
    from numba import cuda, float32

    @cuda.jit
    def axpby_clamp_kernel(x, y, a, b, lo, hi, out):
        i = cuda.grid(1)
        if i < out.shape[0]:
            r = a * x[i] + b * y[i]
            out[i] = min(max(r, lo), hi)

    @cuda.jit
    def oscillators_kernel(u0, steps, out):
        i = cuda.grid(1)
        if i < out.shape[0]:
            h = float32(H)
            hh = float32(H / 2)
            h6 = float32(H / 6)
            two = float32(2.0)
            u = u0[i]
            v = float32(0.0)
            for _ in range(steps):
                a1 = v
                b1 = -(u + u * u * u)
                a2 = v + hh * b1
                w = u + hh * a1
                b2 = -(w + w * w * w)
                a3 = v + hh * b2
                w = u + hh * a2
                b3 = -(w + w * w * w)
                a4 = v + h * b3
                w = u + h * a3
                b4 = -(w + w * w * w)
                u = u + h6 * (a1 + two * a2 + two * a3 + a4)
                v = v + h6 * (b1 + two * b2 + two * b3 + b4)
            out[i] = u

    def axpby_clamp(x, y, a, b, lo, hi, out):
        n = out.shape[0]
        axpby_clamp_kernel[(n + 255) // 256, 256](x, y, np.float32(a), np.float32(b),
                                                   np.float32(lo), np.float32(hi), out)

    def oscillators(u0, steps, out):
        n = out.shape[0]
        oscillators_kernel[(n + 255) // 256, 256](u0, steps, out)

    return axpby_clamp, oscillators


def _base_axpby_clamp(x, y, a, b, lo, hi, out):
    _numba_baselines()[0](x, y, a, b, lo, hi, out)


def _base_oscillators(u0, steps, out):
    _numba_baselines()[1](u0, steps, out)


@lru_cache(maxsize=None)
def _cupy_gelu():
    import cupy as cp

    return cp.ElementwiseKernel(
        "float32 x", "float32 y",
        f"const float z = {GELU_C!r}f * (x + {GELU_A!r}f * x * x * x);"
        "y = 0.5f * x * (1.0f + tanhf(z));",
        "gelu_reference")


def _base_gelu(x, out):
    _cupy_gelu()(x, out)


@lru_cache(maxsize=None)
def _cupy_horner():
    import cupy as cp

    return cp.RawKernel(r"""
    extern "C" __global__ void horner(const float* x, const float* c, int m, float* out, long long n) {
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) {
            const float t = fminf(fmaxf(x[i], -1.0f), 1.0f);
            float acc = c[m - 1];
            for (int k = m - 2; k >= 0; --k) acc = fmaf(acc, t, c[k]);
            out[i] = acc;
        }
    }""", "horner")


def _base_horner(x, coeffs, out):
    n = out.size
    _cupy_horner()(((n + 255) // 256,), (256,), (x, coeffs, np.int32(coeffs.size), out, np.int64(n)))


# --------------------------------------------------------------------------- the lab
LAB = Lab(
    name="roofline",
    title="Lab 4: roofline",
    setup="import math\nimport numpy as np\nfrom numba import cuda, float32\n",
    exercises=(
        Exercise(
            name="axpby_clamp",
            title="Scale, add and clamp in one pass, memory-bound (Numba)",
            backend="numba",
            args=("x", "y", "a", "b", "lo", "hi", "out"),
            inputs=_axpby_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=_axpby_reference,
            cases=lambda sim: awkward_1d(sim, LARGE),
            timing_case={"n": 1 << 26},  # 3 arrays of 256 MiB: far beyond the 60 MiB L2
            baseline=_base_axpby_clamp,
            baseline_name="reference kernel (one pass, one element per thread)",
            bytes_moved=lambda p: 3 * 4 * p["n"],
            flops=lambda p: 3 * p["n"],  # two multiplies and an add; the clamp is not counted
            points=2,
            # A one-pass kernel reads and writes as much as the reference, so it runs at about
            # 1.0x; three separate passes (scale, add, clamp) move 7 arrays instead of 3: ~0.4x.
            speed=Speed(2, full_at=0.8, zero_at=0.4),
            forbidden=NO_HOST_MATH,
        ),
        Exercise(
            name="oscillators",
            title="An ensemble of oscillators, compute-bound (Numba)",
            backend="numba",
            args=("u0", "steps", "out"),
            inputs=_osc_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda u0, steps: {"out": rk4_duffing(u0, steps)},
            cases=_osc_cases,
            # 2**20 oscillators (about four waves of resident threads on an H200) x 128 steps:
            # 38 x 128 / 8 = 608 FLOP per byte, far right of the ridge. The size is bounded by
            # the float64 reference on the host, which the grader computes once at this size
            # (a few seconds); the GPU needs a fraction of a millisecond.
            timing_case={"n": 1 << 20, "steps": 128},
            baseline=_base_oscillators,
            baseline_name="reference kernel (float32 RK4, one oscillator per thread)",
            bytes_moved=lambda p: 2 * 4 * p["n"],
            flops=lambda p: RK4_FLOPS * p["n"] * p["steps"],
            points=2,
            # A float32 kernel written like the prompt's formulas runs at about 1.0x. One that
            # slips into float64 does every step on the FP64 units, at half the FP32 rate on an
            # H200 (Programming Guide, throughput table; 1/64 on GeForce cards): its PTX has the
            # same 27 floating-point instructions per step, all f64, so about 0.6x is expected.
            speed=Speed(2, full_at=0.8, zero_at=0.6),
            forbidden=NO_HOST_MATH,
            # (rtol, atol). float32 rounding accumulates over the steps: a NumPy emulation gave
            # 1.4e-5 of the largest value at 256 steps and amplitude 16 (the largest the timing's
            # input scaling makes), 1.2e-5 at 1024 steps and amplitude 2.
            tolerance={"float32": (1e-4, 1e-4)},
        ),
        Exercise(
            name="gelu",
            title="GELU in one fused kernel (CuPy)",
            backend="cupy",
            args=("x", "out"),
            inputs=_gelu_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda x: {"out": gelu64(x)},
            cases=lambda sim: awkward_1d(sim, LARGE),
            timing_case={"n": 1 << 26},
            baseline=_base_gelu,
            baseline_name="reference fused cupy.ElementwiseKernel",
            bytes_moved=lambda p: 2 * 4 * p["n"],
            flops=lambda p: 8 * p["n"],  # x^3 (2), FMA (2), scale (1), 1 + (1), 0.5 x (1), product (1); tanh not counted
            points=1,
            # One fused kernel moves 2 arrays, as the reference does (~1.0x); the same formula in
            # CuPy array operations launches 8 kernels and moves 18 arrays.
            speed=Speed(2, full_at=0.8, zero_at=0.4),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,
            # (rtol, atol). 1 + tanh(z) cancels for negative x: float32 keeps fewer digits of the
            # small results there, so errors are judged against the case's largest value.
            tolerance={"float32": (1e-5, 1e-5)},
        ),
        Exercise(
            name="horner_cuda",
            title="Horner's rule in CUDA C (CuPy, stretch)",
            backend="cupy",
            args=("x", "coeffs", "out"),
            inputs=_horner_inputs,
            outputs={"out": Out(lambda p: _vec(p["n"]))},
            reference=lambda x, coeffs: {"out": horner64(x, coeffs)},
            cases=_horner_cases,
            # degree 1024: 2048 FLOPs for 8 bytes per element, far right of the ridge; 2**20
            # elements keep the host's float64 reference (computed once) to a few seconds.
            timing_case={"n": 1 << 20, "m": 1025},
            baseline=_base_horner,
            baseline_name="reference CuPy raw kernel (float32 Horner, fmaf)",
            bytes_moved=lambda p: 2 * 4 * p["n"] + 4 * p["m"],
            flops=lambda p: 2 * (p["m"] - 1) * p["n"],
            points=1,
            speed=Speed(1, full_at=0.8, zero_at=0.4),
            forbidden=CUPY_KERNEL_ONLY,
            gpu_only=True,
            # (rtol, atol), the order measure.compare reads them. Horner in float32: rounding
            # grows with the degree; a NumPy emulation of float32 FMAs stayed below 2e-7 of the
            # largest value up to degree 1024.
            tolerance={"float32": (1e-5, 2e-5)},
        ),
    ),
)
