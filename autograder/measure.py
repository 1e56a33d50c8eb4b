"""Judging one case: poison and guard values, and the comparison with the float64 reference.

Used by the judge (batch grading and ``check()``); nothing here runs learner code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .spec import Exercise

POISON_INT = -123456789
GUARD = 256  # elements around every array a learner gets; out-of-bounds accesses land here

# Guards of floating arrays hold a NaN with a payload no arithmetic produces, so a stray
# write of NaN (say, a sum that read a guard) still changes the bits and is seen.
_GUARD_NAN_BITS = {2: 0x7E5A, 4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}


# Outputs start as a quiet NaN with a payload of their own, so that an element never written is
# told apart from one the call wrote NaN into (by reading out of bounds, say).
_POISON_NAN_BITS = {2: 0x7EAD, 4: 0x7FC0DEAD, 8: 0x7FF80000DEADBEEF}


def guard_fill(dtype):
    """The poison for outputs: a marked NaN for floats, POISON_INT (wrapped) for integers."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        bits = _POISON_NAN_BITS.get(dtype.itemsize)
        return np.array(bits, dtype=f"u{dtype.itemsize}").view(dtype)[()] if bits else np.nan
    return np.array(POISON_INT, dtype=np.int64).astype(dtype)[()]


def never_written(values: np.ndarray) -> np.ndarray:
    """Where a float output still holds the poison, bit for bit."""
    bits = _POISON_NAN_BITS.get(values.dtype.itemsize)
    if values.dtype.kind != "f" or bits is None:
        return np.zeros(values.shape, dtype=bool)
    return values.view(f"u{values.dtype.itemsize}") == bits


def guard_pattern(dtype) -> np.generic:
    """The bit pattern of a guard element, as an unsigned integer of the element's size."""
    dtype = np.dtype(dtype)
    bits = np.dtype(f"u{dtype.itemsize}")
    if dtype.kind == "f" and dtype.itemsize in _GUARD_NAN_BITS:
        return bits.type(_GUARD_NAN_BITS[dtype.itemsize])
    return np.array([guard_fill(dtype)], dtype=dtype).view(bits)[0]


def overruns(flat: np.ndarray, pattern: np.generic, guard: int) -> tuple[int, int]:
    """How many guard elements (before, after) of a guarded array changed, bit for bit."""
    bits = flat.view(pattern.dtype)
    return (int(np.count_nonzero(bits[:guard] != pattern)), int(np.count_nonzero(bits[len(bits) - guard:] != pattern)))


@dataclass
class CaseResult:
    params: dict
    passed: bool
    max_abs_err: float | None = None
    message: str = ""


def describe(params) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _count(n: int, noun: str) -> str:
    """'1 element', '3 elements': counts in messages a learner reads."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


# An input the judge compared with its copy from before the call, on the device, and found the same.
UNCHANGED = object()


def reference64(ex: Exercise, host_inputs) -> dict:
    """The exercise's reference outputs for these inputs, computed in float64."""
    return ex.reference(
        **{k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
           for k, v in host_inputs.items()}
    )


def compare(ex: Exercise, params, host_inputs, outputs, inputs_after, faults=(), ref64=None) -> CaseResult:
    """Judge one case: no memory faults, inputs untouched, every output within tolerance
    of the float64 reference (``ref64``, where it was computed already)."""
    params = dict(params)
    if faults:
        return CaseResult(params, False, None, "; ".join(str(f) for f in faults))
    for name, before in host_inputs.items():
        if not isinstance(before, np.ndarray):
            continue
        after = inputs_after.get(name)
        if after is UNCHANGED:
            continue
        if after is None or after.shape != before.shape or not np.array_equal(after, before, equal_nan=True):
            return CaseResult(params, False, None, f"input '{name}' was modified by the call")
    if ref64 is None:
        ref64 = reference64(ex, host_inputs)
    worst = 0.0
    for name, spec in ex.outputs.items():
        got = outputs.get(name)
        want = np.asarray(ref64[name])
        if got is None or tuple(got.shape) != tuple(want.shape):
            shape = None if got is None else tuple(got.shape)
            return CaseResult(params, False, None, f"output '{name}' has shape {shape}, expected {want.shape}")
        if np.dtype(spec.dtype).kind in "iub":
            bad = got != want
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                never = " (never written)" if got[idx] == guard_fill(spec.dtype) and spec.init is None else ""
                return CaseResult(params, False, None,
                                  f"{name}{list(idx)} = {got[idx]}{never}, expected {want[idx]}; "
                                  f"{int(bad.sum())} of {bad.size} elements wrong")
            continue
        rtol, atol = ex.tol(spec.dtype)
        got64 = got.astype(np.float64)
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        err = np.abs(got64 - want)
        # One step of the type's subnormals on top: near zero the output type's spacing is absolute
        # (float16's is 6e-8), so a relative bound alone fails the correctly rounded value there.
        step = float(np.finfo(got.dtype).smallest_subnormal) if got.dtype.kind == "f" else 0.0
        bad = ~(err <= atol * max(scale, 1e-30) + rtol * np.abs(want) + step)  # NaN compares False: fails
        case_err = float(np.max(err)) if err.size else 0.0  # NaN if any element is NaN
        worst = max(worst, case_err) if not math.isnan(case_err) else case_err
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            # Adding to the starting NaN keeps its payload on a CPU (the simulator), so an element
            # still holding it was never written, or only added to; on a GPU the sum is a plain NaN.
            unwritten = int(never_written(got).sum()) if spec.init is None else 0
            nan = int(np.isnan(got64).sum()) - unwritten
            hint = (f"; {_count(unwritten, 'element')} never set: still the NaN the grader starts "
                    f"'{name}' with (never written, or only added to)") if unwritten else ""
            hint += (f"; {_count(nan, 'element')} written as NaN (read out of bounds, or from an element "
                     f"not yet written or never set?)") if nan else ""
            return CaseResult(params, False, case_err,
                              f"{name}{list(idx)} = {float(got[idx]):.7g}, expected {want[idx]:.6g}; "
                              f"{int(bad.sum())} of {bad.size} elements wrong{hint}")
    return CaseResult(params, True, worst, "")
