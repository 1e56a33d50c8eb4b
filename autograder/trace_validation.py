"""How close the simulator's traced memory analysis comes to the hardware's counters.

For each Numba reference kernel of Parts I and II, the same case and the same inputs are run
twice: traced in the CUDA simulator (``memtrace``: sectors per request, bytes moved at 32-byte
granularity) and measured by Nsight Compute on the GPU (the L1 counters of global loads and
stores). Both runs are the trusted reference, each in a runner of its own. Needs a GPU and ncu.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .labs import get_lab
from .measure import describe

PARTS_I_II = ("first_kernel", "warps_sms", "indexing", "memory", "roofline", "reduction", "memory_access",
              "matmul", "softmax", "streams", "diagnosis")
TOLERANCE = 0.10  # the simulated figure agrees when within 10% of the measured one


@dataclass
class Row:
    lab: str
    exercise: str
    case: str
    simulated: dict  # load/store sectors per request and bytes moved, from the trace
    measured: dict  # the same figures from Nsight Compute
    error: str = ""

    def agrees(self, key: str) -> bool | None:
        s, m = self.simulated.get(key), self.measured.get(key)
        if s is None and m is None:
            return None
        if s is None or m is None:
            return False
        return abs(s - m) <= TOLERANCE * max(abs(m), 1e-9)


KEYS = ("load_sectors_per_request", "store_sectors_per_request", "bytes_moved")


def exercises(labs=PARTS_I_II):
    """(lab, exercise) for every Numba exercise with a reference that the simulator can run."""
    for name in labs:
        lab = get_lab(name)
        for ex in lab.exercises:
            if ex.backend == "numba" and ex.baseline is not None and ex.simulate is None and not ex.gpu_only:
                yield lab, ex


def _case(lab, ex):
    index = [e.name for e in lab.exercises].index(ex.name)
    params = ex.largest_case(True)
    return params, ex.inputs(params, np.random.default_rng([2024, index]))


def simulated(lab, ex, params, inputs) -> dict:
    from .judge import Judge, Options
    from .memtrace import checked_profile

    judge = Judge(lab, Options(simulator=True, seed=0, timeout=900.0, sandboxed=False, profile=True))
    try:
        judge.run_case(judge.reference_runner(), ex, params, inputs, profile=True)
        s = (checked_profile(judge.traced) or {}).get("summary") or {}
    finally:
        judge.close()
    moved = (s.get("load_bytes_moved") or 0) + (s.get("store_bytes_moved") or 0)
    return {"load_sectors_per_request": s.get("load_sectors_per_request"),
            "store_sectors_per_request": s.get("store_sectors_per_request"), "bytes_moved": float(moved),
            "launches": s.get("launches")}


def measured(lab, ex, params, inputs, ncu: str) -> dict:
    from .judge import Judge, Options

    judge = Judge(lab, Options(simulator=False, seed=0, timeout=900.0, sandboxed=False))
    try:
        kernels = judge._under_ncu(ex, params, inputs, ncu, trusted=True)
    finally:
        judge.close()
    ld_req, ld_sec = sum(k.load_requests for k in kernels), sum(k.load_sectors for k in kernels)
    st_req, st_sec = sum(k.store_requests for k in kernels), sum(k.store_sectors for k in kernels)
    return {"load_sectors_per_request": ld_sec / ld_req if ld_req else None,
            "store_sectors_per_request": st_sec / st_req if st_req else None,
            "bytes_moved": 32.0 * (ld_sec + st_sec), "launches": len(kernels)}


def validate(labs=PARTS_I_II, workers: int = 8) -> list[Row]:
    """Every reference kernel of ``labs``: traced (in parallel, on the CPU) and measured (one at a
    time, on the GPU)."""
    from .nsight import ncu_path

    ncu = ncu_path()
    if ncu is None:
        raise RuntimeError("Nsight Compute (ncu) is not installed here")
    todo = [(lab, ex, *_case(lab, ex)) for lab, ex in exercises(labs)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        traced = [pool.submit(simulated, lab, ex, params, inputs) for lab, ex, params, inputs in todo]
        rows = []
        for (lab, ex, params, inputs), fut in zip(todo, traced):
            row = Row(lab.name, ex.name, describe(params), {}, {})
            try:
                row.measured = measured(lab, ex, params, inputs, ncu)
                row.simulated = fut.result()
            except Exception as exc:  # noqa: BLE001 - one kernel that fails is a row that says so
                quiet = "no kernel was launched" in str(exc)
                row.error = "launches no kernel: it only copies" if quiet else f"{type(exc).__name__}: {exc}"[:200]
            rows.append(row)
    return rows


def table(rows: list[Row]) -> str:
    """Simulated against measured, one row per kernel; a figure off by more than 10% is starred."""
    def cell(row, key, fmt):
        s, m = row.simulated.get(key), row.measured.get(key)
        text = f"{'-' if s is None else format(s, fmt)} / {'-' if m is None else format(m, fmt)}"
        return text + ("" if row.agrees(key) in (True, None) else " *")

    lines = [f"{'lab: exercise':<30} {'load sect/req':>15} {'store sect/req':>15} {'MB moved':>17}",
             f"{'':<30} {'sim / measured':>15} {'sim / measured':>15} {'sim / measured':>17}"]
    for r in rows:
        name = f"{r.lab}: {r.exercise}"[:30]
        if r.error:
            lines.append(f"{name:<30} {r.error[:57]}")
            continue
        mb = {k: (v / 1e6 if v is not None else None) for k, v in (("s", r.simulated.get("bytes_moved")),
                                                                    ("m", r.measured.get("bytes_moved")))}
        moved = f"{mb['s']:.2f} / {mb['m']:.2f}" + ("" if r.agrees("bytes_moved") else " *")
        lines.append(f"{name:<30} {cell(r, 'load_sectors_per_request', '.1f'):>15} "
                     f"{cell(r, 'store_sectors_per_request', '.1f'):>15} {moved:>17}")
    return "\n".join(lines)


def summary(rows: list[Row]) -> tuple[int, int]:
    """(figures within 10%, figures compared), over every row that ran."""
    checks = [r.agrees(k) for r in rows if not r.error for k in KEYS]
    return sum(c is True for c in checks), sum(c is not None for c in checks)
