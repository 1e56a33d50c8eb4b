"""Nsight Compute behind ``check(fn, profile=True)`` and ``grade --profile`` on a GPU.

Nsight Compute (``ncu``) replays each kernel launched between ``cuProfilerStart`` and
``cuProfilerStop`` several times, reading a few hardware counters per pass. This module holds
what the course asks of it: the counters (``METRICS``), the command line, a parser for its raw
CSV page, the figures a learner reads (``Kernel``), a side-by-side table and one plain sentence
per problem (``diagnose``). Parsing never trusts its input: text from a learner's process may be
forged, so every number is checked and a line that is not understood is skipped.
"""
from __future__ import annotations

import csv
import glob
import io
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

STALLS = ("long_scoreboard", "barrier", "mio_throttle", "lg_throttle", "short_scoreboard", "math_pipe_throttle",
          "wait", "not_selected", "selected", "no_instruction", "drain", "membar", "branch_resolving",
          "dispatch_stall", "imc_miss", "misc", "sleeping", "tex_throttle")
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
_FLOP = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks", "launch__registers_per_thread", "launch__shared_mem_per_block",
    "launch__block_size", "launch__grid_size",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum",
    *(_FLOP.format(op) for op in ("fadd", "fmul", "ffma", "dadd", "dmul", "dfma")),
    *(_STALL.format(s) for s in STALLS),
)

# What each stall reason means, in words a learner knows from chapters 2-7 (short: a table cell).
STALL_WORDS = {
    "long_scoreboard": "global memory", "barrier": "barrier", "mio_throttle": "shared queue",
    "lg_throttle": "global queue", "short_scoreboard": "shared memory", "math_pipe_throttle": "math units",
    "wait": "fixed latency", "not_selected": "not selected", "selected": "issuing", "no_instruction": "instr. fetch",
    "drain": "store drain", "membar": "memory fence", "branch_resolving": "branch", "dispatch_stall": "dispatch",
    "imc_miss": "const cache", "misc": "other", "sleeping": "sleeping", "tex_throttle": "texture queue",
}
LIMITERS = {"registers": "registers", "shared_mem": "shared memory", "warps": "block size",
            "blocks": "blocks per SM"}
MAX_KERNELS = 64  # launches kept from one profile: a learner's process may print any number of rows
PERMISSION_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"


class ProfileError(Exception):
    """Nsight Compute could not profile: missing, not allowed to read counters, or the run failed."""


@dataclass
class Kernel:
    """One kernel launch's figures, as a learner reads them."""
    name: str
    block: tuple = ()
    grid: tuple = ()
    duration_us: float = 0.0
    dram_pct: float = 0.0  # DRAM throughput, % of the GPU's peak
    dram_bytes: float = 0.0  # read + written at DRAM
    achieved_occupancy_pct: float = 0.0
    theoretical_occupancy_pct: float = 0.0
    limiter: str = "none"  # what caps the theoretical occupancy
    registers: int = 0  # per thread
    shared_bytes: int = 0  # per block
    load_sectors_per_request: float | None = None
    store_sectors_per_request: float | None = None
    global_bytes: float = 0.0  # 32-byte sectors requested at L1, loads and stores
    load_requests: float = 0.0  # warp-wide global load instructions
    load_sectors: float = 0.0
    store_requests: float = 0.0
    store_sectors: float = 0.0
    shared_load_ways: float | None = None  # wavefronts per shared load instruction: 1 = no bank conflict
    shared_store_ways: float | None = None
    flops: float = 0.0  # fp32 and fp64 adds, multiplies and 2 per fused multiply-add
    stalls: dict = field(default_factory=dict)  # reason -> cycles per issued instruction, largest first

    @property
    def shared_ways(self) -> float | None:
        ways = [w for w in (self.shared_load_ways, self.shared_store_ways) if w is not None]
        return max(ways) if ways else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["block"], d["grid"] = list(self.block), list(self.grid)
        return d


# --------------------------------------------------------------------------- running ncu
def ncu_path() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in sorted(glob.glob("/usr/local/cuda*/bin/ncu")) + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def install_dirs(ncu: str) -> list[str]:
    """The folders ncu runs from, to bind into a sandbox: its launcher looks for the real
    installation next to the toolkit or under /opt/nvidia."""
    real = Path(ncu).resolve()
    dirs = [str(real.parent.parent)]
    dirs += glob.glob(str(real.parent.parent / "nsight-compute*")) + glob.glob("/opt/nvidia/nsight-compute*")
    return sorted({d for d in dirs if os.path.isdir(d)})


def command(ncu: str | None = None, report: str | None = None) -> list[str]:
    """The ncu command line that profiles what follows it: only the region between
    cuProfilerStart and cuProfilerStop, at the clocks the GPU runs at when timed."""
    ncu = ncu or ncu_path() or "ncu"
    argv = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--target-processes", "all",
            "--metrics", ",".join(METRICS)]
    if report:
        return argv + ["--export", report, "--force-overwrite"]
    return argv + ["--csv", "--page", "raw", "--print-units", "base"]


def import_command(report: str, ncu: str | None = None) -> list[str]:
    return [ncu or ncu_path() or "ncu", "--import", report, "--csv", "--page", "raw", "--print-units", "base"]


def problem_in(text: str) -> str:
    """Why ncu did not profile, from its own messages, or ''."""
    if "ERR_NVGPUCTRPERM" in text:
        return ("this machine does not let this user read the GPU's performance counters "
                f"(ERR_NVGPUCTRPERM); an administrator can allow it: see {PERMISSION_URL}")
    if "No kernels were profiled" in text:
        return "no kernel was launched inside the profiled region"
    errors = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
    return "; ".join(errors)[:500]


def profile_script(script, args=(), *, report=None, timeout: float = 300, env: dict | None = None) -> list[Kernel]:
    """Run ``python script *args`` under Nsight Compute and return one Kernel per launch made
    between ``cuda.profile_start()`` and ``cuda.profile_stop()`` (or CuPy's profiler start/stop),
    in launch order. ``report``: also keep the .ncu-rep file, for the Nsight Compute UI."""
    ncu = ncu_path()
    if ncu is None:
        raise ProfileError("Nsight Compute (ncu) is not installed here; it comes with the CUDA toolkit")
    run_env = dict(os.environ, **(env or {}))
    target = [sys.executable, str(script), *map(str, args)]
    try:
        if report:
            report = str(report)
            first = subprocess.run(command(ncu, report) + target, capture_output=True, text=True,
                                   timeout=timeout, env=run_env)
            out = first.stdout + first.stderr
            path = report if report.endswith(".ncu-rep") else report + ".ncu-rep"
            if first.returncode != 0 or not os.path.exists(path):
                raise ProfileError(problem_in(out) or f"the profiled script failed:\n{_tail(out)}")
            second = subprocess.run(import_command(path, ncu), capture_output=True, text=True, timeout=timeout)
            text = second.stdout
        else:
            run = subprocess.run(command(ncu) + target, capture_output=True, text=True, timeout=timeout, env=run_env)
            text, out = run.stdout, run.stdout + run.stderr
            if run.returncode != 0:
                raise ProfileError(problem_in(out) or f"the profiled script failed:\n{_tail(out)}")
    except subprocess.TimeoutExpired:
        raise ProfileError(f"profiling took longer than {timeout:g} s") from None
    kernels = parse(text)
    if not kernels:
        raise ProfileError(problem_in(out) or "no kernel was launched between profile_start and profile_stop")
    return kernels


def _tail(text: str, lines: int = 12) -> str:
    keep = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==PROF==")]
    return "\n".join(keep[-lines:])


# --------------------------------------------------------------------------- parsing
def _number(text) -> float | None:
    try:
        v = float(str(text).replace(",", ""))
    except ValueError:
        return None
    return v if math.isfinite(v) and v >= 0 else None


def _dims(text) -> tuple:
    nums = re.findall(r"\d+", str(text))[:3]
    return tuple(min(int(n), 2**31) for n in nums)


def short_name(name: str) -> str:
    """A kernel's name without its C++ signature or Numba's mangled suffix."""
    name = str(name)
    name = re.sub(r"\(.*$", "", name)  # the argument list
    name = re.sub(r"\[.*$", "", name)  # Numba's ABI tag and hash
    name = name.split("::")[-1]
    name = re.sub(r"^void\s+", "", name)
    name = re.sub(r"<.*$", "", name)
    return (name.strip() or "kernel")[:60]


def parse(text: str) -> list[Kernel]:
    """The launches in ncu's raw CSV page (``--csv --page raw``), header rows and all; lines
    that are not part of the table (the program's own output, ncu's notes) are skipped."""
    rows = [ln for ln in str(text).splitlines() if ln.startswith('"')]
    header, kernels = None, []
    for row in csv.reader(io.StringIO("\n".join(rows))):
        if row and row[0] == "ID" and "Kernel Name" in row:
            header = row
            continue
        if header is None or len(row) != len(header) or not row[0].isdigit():
            continue  # the units row, or a line that only looks like CSV
        k = kernel_of(dict(zip(header, row)))
        if k is not None:
            kernels.append(k)
        if len(kernels) >= MAX_KERNELS:
            break
    return kernels


def kernel_of(d: dict) -> Kernel | None:
    """One row of the raw page as a Kernel, or None when its core figures are missing."""
    def num(metric, default=None):
        v = _number(d.get(metric, ""))
        return default if v is None else v

    duration = num("gpu__time_duration.sum")
    if duration is None:
        return None

    def ratio(a, b):
        x, y = num(a), num(b)
        return x / y if x is not None and y else None

    limits = {k: num(f"launch__occupancy_limit_{k}") for k in LIMITERS}
    theoretical = min(num("sm__maximum_warps_per_active_cycle_pct", 0.0), 100.0)
    limiter = "none"
    known = {k: v for k, v in limits.items() if v is not None}
    if known and theoretical < 99.5:
        limiter = LIMITERS[min(known, key=known.get)]
    stalls = {s: num(_STALL.format(s)) for s in STALLS}
    stalls = dict(sorted(((s, v) for s, v in stalls.items() if v), key=lambda kv: -kv[1]))
    flops = sum(num(_FLOP.format(op), 0.0) * (2 if op.endswith("fma") else 1)
                for op in ("fadd", "fmul", "ffma", "dadd", "dmul", "dfma"))
    sectors = num("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 0.0) + num(
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", 0.0)
    return Kernel(
        name=short_name(d.get("Kernel Name", "")), block=_dims(d.get("Block Size", "")),
        grid=_dims(d.get("Grid Size", "")), duration_us=duration / 1e3,
        dram_pct=min(num("dram__throughput.avg.pct_of_peak_sustained_elapsed", 0.0), 100.0),
        dram_bytes=num("dram__bytes_read.sum", 0.0) + num("dram__bytes_write.sum", 0.0),
        achieved_occupancy_pct=min(num("sm__warps_active.avg.pct_of_peak_sustained_active", 0.0), 100.0),
        theoretical_occupancy_pct=theoretical, limiter=limiter,
        registers=int(min(num("launch__registers_per_thread", 0.0), 1e4)),
        shared_bytes=int(min(num("launch__shared_mem_per_block", 0.0), 1e9)),
        load_sectors_per_request=ratio("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                                       "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
        store_sectors_per_request=ratio("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                                        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
        global_bytes=32.0 * sectors,
        load_requests=num("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 0.0),
        load_sectors=num("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 0.0),
        store_requests=num("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", 0.0),
        store_sectors=num("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", 0.0),
        shared_load_ways=ratio("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                               "smsp__inst_executed_op_shared_ld.sum"),
        shared_store_ways=ratio("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
                                "smsp__inst_executed_op_shared_st.sum"),
        flops=flops, stalls=stalls)


def checked(kernels) -> list[dict]:
    """Parsed kernels as plain dicts (for results.json)."""
    return [k.as_dict() for k in (kernels or [])[:MAX_KERNELS] if isinstance(k, Kernel)]


_FIELDS = {"name": str, "block": list, "grid": list, "limiter": str, "stalls": dict}


def checked_dicts(items) -> list[dict]:
    """Kernel dicts as they come back from a judge, reduced to their checked form: known keys,
    finite non-negative numbers, short texts. What a learner's process printed may be forged;
    it is shown, never scored."""
    out = []
    for d in (items if isinstance(items, list) else [])[:MAX_KERNELS]:
        if not isinstance(d, dict):
            continue
        k = {}
        for name, default in asdict(Kernel("")).items():
            v = d.get(name)
            if name in ("name", "limiter"):
                k[name] = str(v if v is not None else default)[:60]
            elif name in ("block", "grid"):
                k[name] = [int(x) for x in (v if isinstance(v, list) else [])[:3]
                           if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**31]
            elif name == "stalls":
                k[name] = {s: float(x) for s, x in (v.items() if isinstance(v, dict) else [])
                           if s in STALLS and _number(x) is not None}
            elif v is None and default is None:
                k[name] = None
            else:
                x = _number(v) if not isinstance(v, bool) else None
                k[name] = x if x is not None else (default if default is not None else None)
        out.append(k)
    return out


# --------------------------------------------------------------------------- reading the figures
def _fmt(v, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def rows(k: Kernel) -> list[tuple[str, str]]:
    top = list(k.stalls.items())[:2]
    return [
        ("duration", _fmt(k.duration_us, ",.1f", " us")),
        ("DRAM throughput (% of peak)", _fmt(k.dram_pct, ".0f", "%")),
        ("occupancy: achieved", _fmt(k.achieved_occupancy_pct, ".0f", "%")),
        ("  theoretical", _fmt(k.theoretical_occupancy_pct, ".0f", "%")),
        ("  limited by", k.limiter),
        ("registers per thread", str(k.registers)),
        ("global loads: sectors/request", _fmt(k.load_sectors_per_request, ".1f")),
        ("global stores: sectors/request", _fmt(k.store_sectors_per_request, ".1f")),
        ("shared: wavefronts/request", _fmt(k.shared_ways, ".1f")),
        ("warps mostly wait for", STALL_WORDS.get(top[0][0], top[0][0]) if top else "-"),
        ("  cycles per instruction", _fmt(top[0][1], ".1f") if top else "-"),
        ("  then for", STALL_WORDS.get(top[1][0], top[1][0]) if len(top) > 1 else "-"),
    ]


def table(columns: dict) -> str:
    """Kernels side by side, one column per label ({label: Kernel}); fits 88 columns for up to 4."""
    labels = list(columns)
    width = min(max([14] + [len(label) + 1 for label in labels]), 26)
    lines = [f"  {'':<30}" + "".join(f"{label[:width - 1]:>{width}}" for label in labels)]
    kernels = [columns[label] for label in labels]
    for i, (what, _) in enumerate(rows(kernels[0])):
        cells = [rows(k)[i][1] for k in kernels]
        lines.append(f"  {what:<30}" + "".join(f"{c[:width - 1]:>{width}}" for c in cells))
    return "\n".join(lines)


def diagnose(k: Kernel, reference: Kernel | None = None) -> list[str]:
    """One plain sentence per problem the counters show, with the chapter that explains it.
    With a reference, only what the kernel does worse than the reference."""
    said = []

    def worse(mine, theirs, factor=1.3):
        return mine is not None and (theirs is None or mine > factor * theirs)

    ld, st = k.load_sectors_per_request, k.store_sectors_per_request
    ref_ld = reference.load_sectors_per_request if reference else None
    ref_st = reference.store_sectors_per_request if reference else None
    for what, mine, theirs in (("loads", ld, ref_ld), ("stores", st, ref_st)):
        if mine is not None and mine > 8.5 and worse(mine, theirs):
            said.append(f"each warp's global {what} touch {mine:.1f} sectors of 32 bytes where a coalesced float32 "
                        f"access touches 4{f' (the reference: {theirs:.1f})' if theirs else ''}: neighbouring threads "
                        "access addresses far apart (a stride); see chapter 7 on coalescing")
    ways, ref_ways = k.shared_ways, reference.shared_ways if reference else None
    if ways is not None and ways > 1.5 and worse(ways, ref_ways):
        said.append(f"each shared-memory access takes {ways:.1f} wavefronts instead of 1: threads of a warp hit the "
                    "same bank (bank conflicts); pad the tile, as chapter 7 does")
    if k.theoretical_occupancy_pct < 50 and (reference is None
                                             or k.theoretical_occupancy_pct < reference.theoretical_occupancy_pct - 10):
        said.append(f"at most {k.theoretical_occupancy_pct:.0f}% of each SM's warp slots can be filled, limited by "
                    f"{k.limiter}: fewer warps hide less memory latency; see chapter 2 on occupancy")
    elif k.achieved_occupancy_pct < 0.6 * k.theoretical_occupancy_pct and (
            reference is None or k.achieved_occupancy_pct < reference.achieved_occupancy_pct - 15):
        said.append(f"only {k.achieved_occupancy_pct:.0f}% of warp slots were busy against {k.theoretical_occupancy_pct:.0f}% "
                    "possible: the grid is too small to fill every SM, or its blocks finish unevenly")
    top = next(iter(k.stalls), None)
    if top == "barrier" and (reference is None or next(iter(reference.stalls), None) != "barrier"):
        said.append("warps spend most of their time waiting at a barrier (__syncthreads): fewer barriers, or less "
                    "work between them done by only some threads; see chapter 6")
    if top == "lg_throttle" and (reference is None or next(iter(reference.stalls), None) != "lg_throttle"):
        said.append("the queue of global-memory instructions is full: many small loads or atomics; load wider words "
                    "or combine atomics in shared memory first")
    if reference is not None and reference.duration_us > 0 and k.duration_us > 1.2 * reference.duration_us and (
            k.dram_pct < reference.dram_pct - 10):
        said.append(f"it reaches {k.dram_pct:.0f}% of DRAM bandwidth where the reference reaches "
                    f"{reference.dram_pct:.0f}%: fewer bytes in flight per thread; see chapter 6, step 5")
    return said
