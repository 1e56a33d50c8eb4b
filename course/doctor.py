"""``autograder doctor``: what this machine has, and what is wrong with it.

Exit status 0 when the course can run here (on a GPU or in the simulator), 1 when
something must be fixed first. Every finding says what to do.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.version import Version

from .device import cupy_runtime_version, gpu_present, nvidia_smi_gpus, package_versions
from .install import (CUPYS, cuda_extra, cuda_text, driver_cuda_version, install_line, installed_version,
                      known_extras, numba_cuda_state, requirements, unmet)

PACKAGES = ("numpy", "numba", "numba-cuda", "cupy-cuda13x", "cupy-cuda12x", "torch", "nbval", "jupyter-book")


def installed() -> dict[str, str]:
    return package_versions(PACKAGES)


def version_problems(v: dict[str, str], gpu: bool, driver_cuda: int | None = None) -> list[str]:
    """Known-bad combinations, from package versions alone. Each entry is a problem and its fix."""
    bad = []
    if "numba" not in v:
        bad.append("numba is not installed: pip install 'numba>=0.60'")
    if "numba-cuda" not in v:
        bad.append("numba-cuda is not installed (numba's own CUDA target is deprecated): pip install numba-cuda")
    if "numpy" in v and "numba-cuda" in v:
        if Version(v["numpy"]) >= Version("2.5") and Version(v["numba-cuda"]) < Version("0.31"):
            bad.append(f"numpy {v['numpy']} with numba-cuda {v['numba-cuda']}: numba-cuda 0.30 calls "
                       "np.row_stack, which numpy 2.5 removed, so no kernel compiles. "
                       "Fix: pip install 'numpy<2.5'")
    cupys = [n for n in v if n.startswith("cupy-")]
    if len(cupys) > 1:
        bad.append(f"{' and '.join(cupys)} are both installed and shadow each other: "
                   f"pip uninstall -y {' '.join(cupys)}, then install the one for your driver")
    if gpu and not cupys:
        extra = cuda_extra(driver_cuda, set()) or "cuda13"  # cuda13 needs a driver for CUDA 13 (580 or newer)
        bad.append(f"CuPy is missing, so CuPy cells and timing will not run: {install_line([extra])}")
    if gpu and driver_cuda is not None and "cupy-cuda13x" in v and driver_cuda < 13000:
        bad.append(f"cupy-cuda13x needs a CUDA 13 driver, but this driver supports CUDA "
                   f"{driver_cuda // 1000}.{driver_cuda % 1000 // 10}: install cupy-cuda12x instead")
    return bad


def cupy_finding(v: dict[str, str], driver: int | None, gpu: bool) -> str:
    """A line on the CuPy package here and whether it fits the driver (version_problems has the fix)."""
    cupys = [n for n in CUPYS if n in v]
    if not cupys:
        return "CuPy: not installed"
    name = cupys[0]
    built = {"cupy-cuda12x": 12, "cupy-cuda13x": 13}.get(name)
    line = f"CuPy: {name} {v[name]}" + (f", built for CUDA {built}" if built else "")
    if not gpu:
        return line + " (not used in simulator mode)"
    if built is None or driver is None:
        return line
    fits = built <= driver // 1000
    return line + f": {'matches' if fits else 'does NOT match'} the CUDA {cuda_text(driver)} driver"


def numba_cuda_finding() -> tuple[str, str | None]:
    state = numba_cuda_state()
    if state == "active":
        return f"numba-cuda: active (numba.cuda comes from numba-cuda {installed_version('numba-cuda')})", None
    if state == "missing":
        return "numba-cuda: not installed", None  # version_problems says it
    return ("numba-cuda: installed but NOT active",
            "numba.cuda is numba's old built-in target, not numba-cuda's: numba-cuda switches itself on "
            "through a .pth file in site-packages when Python starts. Restart Python; if that does not "
            "help, reinstall: pip install --force-reinstall 'numba-cuda<0.31'")


def extras_finding() -> str:
    """Which of the course's extras (pip install "gpu-course[EXTRA]") are complete here."""
    base = set(requirements([]))
    done = [e for e in known_extras() if not unmet([r for r in requirements([e]) if r not in base])]
    rest = [e for e in known_extras() if e not in done]
    return f"Extras complete: {', '.join(done) or 'none'}" + (f"; incomplete: {', '.join(rest)}" if rest else "")


def gpu_facts() -> list[str]:
    gpus = nvidia_smi_gpus()
    if not gpus:
        return ["GPU present, but nvidia-smi could not describe it"]
    return [f"GPU {g['index']}: {g['name']}, compute capability {g['compute_cap']}, "
            f"driver {g['driver_version']}, {g['memory.total']}" for g in gpus]


def live_kernel_check() -> str | None:
    """Compile and run a tiny kernel in a fresh process; None when it works, else the error."""
    code = ("import numpy as np\nfrom numba import cuda\n"
            "@cuda.jit\ndef k(a):\n    i = cuda.grid(1)\n    if i < a.size:\n        a[i] = 2 * i\n"
            "a = cuda.to_device(np.zeros(100, np.float32)); k[1, 128](a)\n"
            "assert a.copy_to_host()[99] == 198\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode == 0:
        return None
    return (r.stderr.strip().splitlines() or ["unknown error"])[-1]


# A correct answer to the first lab's vector_add: the grading check must give it full marks.
HONEST_VECTOR_ADD = """from numba import cuda


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    add_kernel[(out.size + 255) // 256, 256](a, b, out)
"""
GRADING_CHECK_S = 90  # a hung grader is a finding, not a hung doctor (it takes a few seconds)


def grading_check(timeout: float = GRADING_CHECK_S) -> tuple[str, str | None]:
    """Grade a built-in correct answer as `autograder grade` does (its command line, the
    sandbox, a judge and a runner; simulator mode, one exercise, a temporary folder, run from
    another folder): a line saying what happened, and the problem with its fix (None if none).

    Where no sandbox can be made and bubblewrap is not installed, the machine is not set up for
    grading (a learner's): that is said, not counted as a problem, and the rest is checked with
    --no-sandbox. Every other failure of grading is a problem."""
    from autograder.sandbox import available, bwrap_path

    ok, why = available()
    unset = not ok and bwrap_path() is None
    started = time.monotonic()
    try:
        problem = _grade_built_in_answer(["--no-sandbox"] if unset else [], timeout)
    except subprocess.TimeoutExpired:
        problem = f"grading a correct built-in answer did not finish in {timeout:.0f} s: `autograder grade` hangs here"
    if problem:
        return "Grading a class: FAILS", problem
    seconds = time.monotonic() - started
    if unset:
        return (f"Grading a class: needs a sandbox, which cannot be made here ({why}). Only an instructor grading a "
                f"class needs it; the rest of grading works (a correct built-in answer graded with --no-sandbox "
                f"in {seconds:.1f} s)"), None
    return f"Grading a class: works (a correct built-in answer graded in {seconds:.1f} s; sandbox: {why})", None


def _grade_built_in_answer(options: list[str], timeout: float) -> str | None:
    """Grade HONEST_VECTOR_ADD with `autograder grade` in a temporary folder; None when it gets
    full correctness, else what went wrong in the grader's words."""
    with tempfile.TemporaryDirectory(prefix="autograder-doctor-") as tmp:
        Path(tmp, "doctor_check.py").write_text(HONEST_VECTOR_ADD)
        cmd = [sys.executable, "-m", "autograder", "grade", "--lab", "first_kernel", "--simulator", "--exercise",
               "vector_add", "--seed", "1", "--timeout", "30", "--quiet", "--out", "out", *options, "doctor_check.py"]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=_grader_env(), timeout=timeout)
        if r.returncode != 0:
            said = "\n  ".join(r.stderr.strip().splitlines()[-6:]) or f"it exited with status {r.returncode}"
            return f"`autograder grade` fails here:\n  {said}"
        return _graded_wrong(Path(tmp, "out", "doctor_check"))


def _grader_env() -> dict[str, str]:
    """This environment, with the course's checkout importable where `autograder` is not installed."""
    import autograder

    root = str(Path(autograder.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _graded_wrong(work: Path) -> str | None:
    """Why the built-in answer did not get full correctness (None if it did), in the grader's
    words and its judge's last line."""
    from autograder.batch import read_exercises

    result = read_exercises(work).get("vector_add")
    if result is None:
        return f"`autograder grade` wrote no result for a correct built-in answer (none in {work})"
    if result.correctness == result.max_correctness:
        return None
    try:
        last = [ln for ln in (work / "judge.log").read_text().splitlines() if ln.strip()][-1:]
    except OSError:
        last = []
    return (f"a correct built-in answer scored {result.correctness:g} of {result.max_correctness:g} for "
            f"correctness: {result.message or 'no message'}" + "".join(f"\n  judge.log ends: {ln}" for ln in last))


def main() -> int:
    gpu = gpu_present() and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0")
    v = installed()
    print(f"Python {sys.version.split()[0]} at {sys.executable}")
    for name in PACKAGES:
        print(f"  {name:<14} {v.get(name, 'not installed')}")
    if gpu:
        print("Mode: GPU. Every notebook cell runs; labs are timed.")
    else:
        print("Mode: simulator. No usable GPU was found, so notebooks set NUMBA_ENABLE_CUDASIM=1: "
              "Numba kernels run on the CPU (about 10^4 threads per second), cells that start with %%gpu "
              "(CuPy, timing, warp intrinsics) are skipped, and check() grades correctness only. "
              "For the GPU parts use Colab (Runtime > Change runtime type > GPU) or a GPU machine.")
    driver = driver_cuda_version()
    extra = cuda_extra(driver, {n for n in CUPYS if n in v})
    print(f"Driver: supports CUDA up to {cuda_text(driver)}" + (f"; its extra is {extra}" if extra else
          "; too old for the course (it needs CUDA 12 or newer)") if driver else "Driver: none found")
    if gpu:
        for line in gpu_facts():
            print(line)
        runtime = cupy_runtime_version()
        if runtime:
            print(f"CuPy's CUDA runtime: {runtime}")
    print(cupy_finding(v, driver, gpu))
    line, numba_problem = numba_cuda_finding()
    print(line)
    print(extras_finding())
    problems = version_problems(v, gpu, driver) + ([numba_problem] if numba_problem else [])
    if not problems and "numba" in v:
        if gpu:
            err = live_kernel_check()
            if err:
                problems.append(f"a test kernel failed to compile or run: {err}")
            else:
                print("A test kernel compiled and ran on the GPU.")
    if problems:
        print("Grading a class: not tried (fix the problems below first)")
    else:  # what `autograder grade` does, end to end: what it finds is a problem like any other
        line, problem = grading_check()
        print(line)
        problems += [problem] if problem else []
    for p in problems:
        print(f"PROBLEM: {p}")
    print("Setup is broken: fix the problems above." if problems else "Setup is fine.")
    return 1 if problems else 0
