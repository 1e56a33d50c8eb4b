"""The CUDA toolkit's command-line tools, run from a notebook.

``find`` locates compute-sanitizer, cuda-gdb or nvcc (on the PATH or in the toolkit's
folder); ``run`` runs a command with a time limit and returns what it printed, cleaned for a
page: no machine paths, no mangled Numba names, lines cut to the page's width, and only the
lines that matter. The chapter *Tools* prints every report through it.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

WIDTH = 88  # a printed line fits the page

# A Numba kernel's full name, e.g. __main__::fill[abi:v1,cw51...](Array<float, (int)1, C, mutable, aligned>)
_ABI = re.compile(r"\[abi:[^\]]*\]")
_ARRAY_ARGS = re.compile(r"\((?:Array<[^>]*>(?:, )?)+\)")
_PATH = re.compile(r"(?<![\w.~/:])/(?:[\w.+@-]+/)+(?=[\w.+@-])")   # the folders of an absolute path
_MANGLED = re.compile(r"\b(\w+)\[v\d+,cw\w+\]")                      # ncu-style names: fill[v1,cw51...]
_ITANIUM = re.compile(r"_ZN[\w$]+")                                    # _ZN6cudapy8__main__5blur3B2v1E...


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


def find(name: str) -> str | None:
    """The path of a CUDA tool (``nvcc``, ``compute-sanitizer``, ``cuda-gdb``), or None."""
    found = shutil.which(name)
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    for home in [h for h in homes if h] + sorted(glob.glob("/usr/local/cuda*"), reverse=True):
        candidate = os.path.join(home, "bin", name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def missing(name: str) -> str:
    return f"{name} is not installed here (it comes with the CUDA toolkit): this cell shows nothing."


def clean(text: str, drop=(), keep_first: int | None = None) -> str:
    """``text`` fit for a page: folders of absolute paths removed (a file keeps its name),
    Numba's mangled kernel names shortened, lines matching any pattern in ``drop`` removed,
    runs of blank report lines collapsed, long lines wrapped at WIDTH, at most ``keep_first`` lines."""
    home = os.path.expanduser("~")
    out = []
    for line in text.splitlines():
        if any(re.search(p, line) for p in drop):
            continue
        line = line.replace(home + "/", "").replace("\x1b[1m", "").replace("\x1b[0m", "")
        line = _ARRAY_ARGS.sub("", _ABI.sub("", _ITANIUM.sub(_unmangle, line)))
        line = _MANGLED.sub(r"\1", _PATH.sub("", line)).rstrip()
        if out and line.strip(" =") == "" and out[-1].strip(" =") == "":
            continue
        if len(line) <= WIDTH:
            out.append(line)
        else:  # wrapped under its own prefix ("=========     ", an indent), continued 4 deeper
            prefix = re.match(r"[=\s]*", line)[0]
            out += textwrap.wrap(line[len(prefix):], WIDTH, initial_indent=prefix,
                                 subsequent_indent=prefix + "    ", break_on_hyphens=False)
    if keep_first is not None and len(out) > keep_first:
        summary = [line for line in out[keep_first:] if "SUMMARY" in line]  # the verdict stays
        out = out[:keep_first] + [f"... ({len(out) - keep_first - len(summary)} more lines)"] + summary
    return "\n".join(out).strip("\n")


def quoted_lines(report: str, script) -> str:
    """The lines of ``script`` that ``report`` names as ``name.py:N``, each once, in order."""
    from pathlib import Path

    path = Path(script)
    source = path.read_text().splitlines()
    numbers = sorted({int(n) for n in re.findall(re.escape(path.name) + r":(\d+)", report)})
    return "\n".join(f"  {path.name}:{n}: {source[n - 1].strip()}" for n in numbers if 0 < n <= len(source))


def run(argv, timeout: float = 120, cwd=None, env: dict | None = None) -> tuple[int | None, str]:
    """Run ``argv`` and return (exit status, stdout and stderr together); status None if it
    did not finish within ``timeout`` seconds. Numba's warning about small grids is switched off:
    the examples launch few blocks on purpose."""
    run_env = dict(os.environ, NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0", **(env or {}))
    try:
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                              cwd=cwd, env=run_env)
    except subprocess.TimeoutExpired as e:
        partial = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, partial + f"\n(stopped after {timeout:g} s)"
    return done.returncode, done.stdout + done.stderr


def nvcc(source: str, flags, ptx: bool = False, timeout: float = 300) -> tuple[int | None, str, str]:
    """Compile CUDA C ``source`` with nvcc and ``flags`` in a temporary folder: to an object file, or
    with ``ptx`` to PTX. Returns (exit status, what nvcc printed, the PTX or ""); the status is None
    when nvcc is missing (the text then says so) or ran past ``timeout``. Needs no GPU."""
    import tempfile

    found = find("nvcc")
    if found is None:
        return None, missing("nvcc"), ""
    memo = _nvcc_memo(found, source, flags, ptx)
    if memo is not None and os.path.isfile(memo):
        with open(memo) as f:
            return tuple(json.load(f))
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.ptx" if ptx else "kernel.o")
        with open(src, "w") as f:
            f.write(source)
        status, log = run([found, *flags, "--ptx" if ptx else "-c", src, "-o", out], timeout=timeout)
        text = ""
        if ptx and status == 0:
            with open(out) as f:
                text = f.read()
    if memo is not None and status is not None:  # a run past its time limit is not remembered
        with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(memo), delete=False) as f:
            json.dump([status, log, text], f)
        os.replace(f.name, memo)
    return status, log, text


def _nvcc_memo(found: str, source: str, flags, ptx: bool) -> str | None:
    """Where an nvcc run of this source with these flags is remembered, when ``COURSE_NVCC_MEMO``
    names a folder (the test run sets one: its notebooks and tests compile many of the same
    sources); else None. The key is everything the result depends on, nvcc itself included."""
    import hashlib

    folder = os.environ.get("COURSE_NVCC_MEMO")
    if not folder or not os.path.isdir(folder):
        return None
    real = os.path.realpath(found)
    key = json.dumps([real, os.stat(real).st_mtime_ns, [str(a) for a in flags], ptx, source])
    return os.path.join(folder, hashlib.sha256(key.encode()).hexdigest() + ".json")


def python(script, *args) -> list[str]:
    """The command line that runs a Python script with this notebook's interpreter."""
    return [sys.executable, str(script), *map(str, args)]


# Lines of a sanitizer report that say nothing about the bug: the host call stack into the
# driver and Python's interpreter, and Python's own traceback of the failure that follows.
SANITIZER_NOISE = (r"Host Frame:(?!.*<module>)", r"Saved host backtrace up to driver entry point at error",
                   r"^Traceback|^  File |^    |^\w*Error:|^numba\.", r"Target application returned an error")

# cuda-gdb's news about host threads and processes.
GDB_NOISE = (r"^\[(New |Thread |Detaching|Inferior|New process)", r"libthread_db", r"^\s*$")
