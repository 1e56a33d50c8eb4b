"""Lab 10's tools, one call each: Nsight Compute or compute-sanitizer run on a notebook's kernel.

Both tools watch a whole process, so the kernel runs in a fresh Python process: a small script
holding the source of the host function, the kernels and device functions it calls and the
constants they use, which copies the given arrays to the GPU and calls the function once. The
arrays are allocated one by one with cudaMalloc (``cuda.to_device``), so memcheck knows where
each ends: a memory pool that carves arrays out of one large allocation hides overruns from it.
"""
from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

import numpy as np

from autograder.shipping import source_of
from course import cuda_tools

SCRIPT = '''\
import math
import sys

import numpy as np
from numba import cuda, float32, float64, int32, int64

{source}


data = np.load(sys.argv[1])
host = [data[f"arg{{i}}"] for i in range(len(data.files))]
if sys.argv[2] == "profile":  # compile and run once outside the profiled region
    {name}(*[cuda.to_device(h) for h in host])
    cuda.synchronize()
args = [cuda.to_device(h) for h in host]
cuda.profile_start()
{name}(*args)
cuda.synchronize()
cuda.profile_stop()
'''


def _script(fn, arrays, folder: Path, mode: str) -> list[str]:
    """Write the script and its arrays into ``folder``; return the command that runs it."""
    np.savez(folder / "arrays.npz", **{f"arg{i}": np.ascontiguousarray(a) for i, a in enumerate(arrays)})
    script = folder / "kernel_run.py"
    script.write_text(SCRIPT.format(source=source_of(fn), name=fn.__name__))
    return [str(script), str(folder / "arrays.npz"), mode]


def profile(fn, *arrays, timeout: float = 300) -> None:
    """Print Nsight Compute's counters for ``fn(*arrays)`` (host NumPy arrays, copied to the GPU)
    and one sentence per problem they show; the longest kernel ``fn`` launches is diagnosed."""
    from autograder import nsight

    with tempfile.TemporaryDirectory() as tmp:
        args = _script(fn, arrays, Path(tmp), "profile")
        try:
            kernels = nsight.profile_script(args[0], args[1:], timeout=timeout)
        except nsight.ProfileError as e:
            print(f"Nsight Compute did not profile {fn.__name__}: {e}")
            return
    print(nsight.table({k.name: k for k in kernels}))
    main = max(kernels, key=lambda k: k.duration_us)
    for sentence in nsight.diagnose(main) or ["Nothing stands out in these counters."]:
        print(textwrap.fill(sentence, 88, initial_indent="- ", subsequent_indent="  "))


def trim_report(text: str) -> str:
    """compute-sanitizer's findings and summary, fit for the page (``cuda_tools.clean``): only
    its own lines, without the banner, blank lines or the host's call stack."""
    own = "\n".join(line for line in text.splitlines()
                     if line.startswith("=========") and line[9:].strip() and "COMPUTE-SANITIZER" not in line)
    return cuda_tools.clean(own, drop=cuda_tools.SANITIZER_NOISE)


def sanitize(tool: str, fn, *arrays, timeout: float = 300) -> None:
    """Print what compute-sanitizer's ``tool`` (memcheck, racecheck, ...) finds in ``fn(*arrays)``."""
    exe = cuda_tools.find("compute-sanitizer")
    if exe is None:
        print(cuda_tools.missing("compute-sanitizer"))
        return
    with tempfile.TemporaryDirectory() as tmp:
        args = _script(fn, arrays, Path(tmp), "sanitize")
        argv = [exe, "--tool", tool, "--print-limit", "10", "--show-backtrace", "no", *cuda_tools.python(*args)]
        status, text = cuda_tools.run(argv, timeout=timeout, cwd=tmp)
    if status is None:
        print(f"compute-sanitizer ({tool}) took longer than {timeout:g} s")
        return
    report = trim_report(text)
    print(report if report else f"compute-sanitizer ({tool}) printed no report (exit status {status}).")
