"""Lab 10's tools, one call each: Nsight Compute or compute-sanitizer run on a notebook's kernel.

Both tools watch a whole process, so the kernel runs in a fresh Python process: a small script
holding the source of the host function, the kernels and device functions it calls and the
constants they use, which copies the given arrays to the GPU and calls the function once. The
arrays are allocated one by one with cudaMalloc (``cuda.to_device``), so memcheck knows where
each ends: a memory pool that carves arrays out of one large allocation hides overruns from it.
"""
from __future__ import annotations

import glob
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

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


def _python_of(obj):
    """The Python function behind a Numba kernel or device function (GPU or simulator), or None."""
    fn = getattr(obj, "py_func", None) or getattr(obj, "fn", None) or obj
    return fn if inspect.isfunction(fn) else None


def shipped_source(fn) -> str:
    """The source of ``fn`` and of every function, kernel and number constant it reaches by a
    global name of its own module (the notebook): what a script needs to call it."""
    constants, sources, seen = {}, [], set()

    def visit(obj) -> None:
        py = _python_of(obj)
        if py is None or py in seen:
            return
        seen.add(py)
        codes, names = [py.__code__], set()
        while codes:
            code = codes.pop()
            names |= set(code.co_names)
            codes += [c for c in code.co_consts if inspect.iscode(c)]
        for name in sorted(names):
            value = py.__globals__.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                constants[name] = value
            elif _python_of(value) is not None and _python_of(value).__module__ == py.__module__:
                visit(value)
        try:
            sources.append(textwrap.dedent(inspect.getsource(py)))
        except (OSError, TypeError) as e:
            raise ValueError(f"the source of {py.__name__} is not available ({e})") from None

    visit(fn)
    head = "\n".join(f"{k} = {v!r}" for k, v in sorted(constants.items()))
    return "\n\n\n".join(([head] if head else []) + sources[::-1])


def _script(fn, arrays, folder: Path, mode: str) -> list[str]:
    """Write the script and its arrays into ``folder``; return the command that runs it."""
    np.savez(folder / "arrays.npz", **{f"arg{i}": np.ascontiguousarray(a) for i, a in enumerate(arrays)})
    script = folder / "kernel_run.py"
    script.write_text(SCRIPT.format(source=shipped_source(fn), name=_python_of(fn).__name__))
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


def sanitizer_path() -> str | None:
    """compute-sanitizer, from PATH or the CUDA toolkit's usual place, or None."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for candidate in sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


# A Numba kernel's name as the tools print it: cudapy::__main__::name[abi:...](Array<...>, ...) or
# its mangled form; shortened to the name the notebook gave it.
NUMBA_NAME = re.compile(r"(?:cudapy::)?(?:\w+::)+(\w+)(?:\[abi:[^\]]*\])?(?:\[[^\]]*\])?(?:\([^()]*\))?")
MANGLED = re.compile(r"_ZN[\w$]+")
PATH = re.compile(r"(?:/[^\s:/]+)+/([^\s:/]+)")


def _unmangle(match) -> str:
    """_ZN6cudapy8__main__5blur3B2v1E5Array... -> blur3: the last of the nested names."""
    text, i, names = match[0], 3, []
    while i < len(text) and text[i].isdigit():
        j = i
        while j < len(text) and text[j].isdigit():
            j += 1
        size = int(text[i:j])
        names.append(text[j:j + size])
        i = j + size
    return names[-1] if names else text


def trim_report(text: str) -> list[str]:
    """compute-sanitizer's findings and summary, without blank lines, the banner or machine paths."""
    keep = []
    for line in text.splitlines():
        if not line.startswith("=========") or not line[9:].strip() or "COMPUTE-SANITIZER" in line:
            continue
        line = PATH.sub(r"\1", NUMBA_NAME.sub(r"\1", MANGLED.sub(_unmangle, line)))
        keep.append(line.rstrip())
    return keep


def sanitize(tool: str, fn, *arrays, timeout: float = 300) -> None:
    """Print what compute-sanitizer's ``tool`` (memcheck, racecheck, ...) finds in ``fn(*arrays)``."""
    exe = sanitizer_path()
    if exe is None:
        print("compute-sanitizer is not installed here; it comes with the CUDA toolkit.")
        return
    with tempfile.TemporaryDirectory() as tmp:
        args = _script(fn, arrays, Path(tmp), "sanitize")
        argv = [exe, "--tool", tool, "--print-limit", "10", "--show-backtrace", "no", sys.executable, *args]
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            print(f"compute-sanitizer ({tool}) took longer than {timeout:g} s")
            return
    lines = trim_report(run.stdout + run.stderr)
    print("\n".join(lines) if lines else f"compute-sanitizer ({tool}) printed no report (exit status {run.returncode}).")
