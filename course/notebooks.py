"""Which notebooks the site shows, and whether their stored outputs are fresh.

A notebook on the site must carry outputs from a real GPU run. Executing it with
``autograder execute`` on a GPU machine writes the outputs and a stamp into its
metadata: the GPU, driver and library versions, and a hash of its code cells. A
notebook whose code changed after that run, or that never ran on a GPU, is stale.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import sys
from pathlib import Path

STAMP_KEY = "course_stamp"
ROOT = Path(__file__).resolve().parent.parent


def executed_notebooks(root: Path = ROOT) -> list[Path]:
    """Notebooks shown with outputs: chapters and lab solutions (student releases have none)."""
    root = Path(root)
    return sorted(list(root.glob("chapters/**/*.ipynb")) + list(root.glob("labs/*/solutions/*.ipynb")))


def student_notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in Path(root).glob("labs/*/*.ipynb"))


def read(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def code_hash(nb: dict) -> str:
    h = hashlib.sha256()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            h.update(_source(cell).rstrip().encode() + b"\n\x1e\n")
    return h.hexdigest()


def staleness(path: Path) -> list[str]:
    """Why this notebook's stored outputs cannot be trusted (empty when they can)."""
    nb = read(path)
    stamp = nb.get("metadata", {}).get(STAMP_KEY)
    if not stamp:
        return [f"{path}: never executed on a GPU (no stamp); run `make gpu-notebooks` on a GPU machine"]
    problems = []
    if not stamp.get("gpu"):
        problems.append(f"{path}: the stamp records no GPU; outputs must come from a real GPU run")
    cap = stamp.get("memory_cap_bytes")
    if not cap or cap > SMALL_GPU_BYTES:
        problems.append(f"{path}: the GPU run had more than {SMALL_GPU_BYTES / 1e9:.0f} GB free; "
                        "`autograder execute` caps it, to prove the notebook fits a 16 GB GPU")
    if stamp.get("code_sha256") != code_hash(nb):
        problems.append(f"{path}: code cells changed after the outputs were produced; re-execute it on a GPU")
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or not _source(cell).strip():
            continue
        if cell.get("execution_count") is None:
            problems.append(f"{path}: code cell {i} has no execution count (not executed)")
            break
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            problems.append(f"{path}: code cell {i} stored an error")
    return problems


def environment() -> dict:
    """The GPU, driver and library versions of this machine, for the stamp."""
    from .device import cupy_runtime_version, nvidia_smi_gpus, package_versions

    info: dict = {"python": sys.version.split()[0],
                  "packages": package_versions(("numpy", "numba", "numba-cuda", "cupy-cuda13x", "cupy-cuda12x",
                                                "torch", "matplotlib"))}
    gpus = nvidia_smi_gpus()
    if gpus:
        info.update(gpu=gpus[0]["name"], driver=gpus[0]["driver_version"], compute_capability=gpus[0]["compute_cap"])
    else:
        info.update(gpu=None)
    runtime = cupy_runtime_version()
    if runtime:
        info["cuda_runtime"] = runtime
    return info


def coalesce_streams(nb) -> None:
    """Join each cell's consecutive stdout (or stderr) outputs into one, as Jupyter shows them.

    A kernel sends a cell's prints in several messages when they are apart in time; stored
    as they come, the site would draw a box for each.
    """
    for cell in nb["cells"]:
        merged = []
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            prev = merged[-1] if merged else None
            if (out["output_type"] == "stream" and prev is not None and prev["output_type"] == "stream"
                    and prev["name"] == out["name"]):
                prev["text"] = "".join(prev["text"]) + "".join(out["text"])
            else:
                merged.append(out)
        if cell["cell_type"] == "code":
            cell["outputs"] = merged


# A learner's GPU may have 16 GB (Colab's T4): every notebook must run with this much free.
SMALL_GPU_BYTES = 15 * 10**9


def run(path: Path, timeout: int = 1200, memory_cap: int | None = None, first: str = "", last: str = ""):
    """Execute a notebook top to bottom in a fresh kernel, as Run All does; return (notebook, facts).

    Errors raise ``nbclient``'s CellExecutionError, naming the cell. On a GPU with ``memory_cap``,
    every GPU has only that many bytes free during the run (course.memory_cap), and the facts
    record the most memory the notebook used. ``first`` and ``last`` are code run before the first
    cell and after the last one (tests use them to watch the run); they are not in the result.
    """
    import contextlib

    import nbformat
    from nbclient import NotebookClient

    from .device import gpu_present
    from .memory_cap import PeakMemory, capped

    nb = nbformat.read(str(path), as_version=4)
    head = [nbformat.v4.new_code_cell(first)] if first else []
    tail = [nbformat.v4.new_code_cell(last)] if last else []
    nb.cells = head + nb.cells + tail
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(Path(path).parent)}})
    facts: dict = {}
    with contextlib.ExitStack() as stack:
        if gpu_present():
            if memory_cap:
                stack.enter_context(capped(memory_cap))
                facts["memory_cap_bytes"] = int(memory_cap)
            peak = stack.enter_context(PeakMemory())
        client.execute()
    nb.cells = nb.cells[len(head):len(nb.cells) - len(tail)]
    if gpu_present():
        facts["peak_gpu_memory_mib"] = peak.used_mib
    return nb, facts


def execute(path: Path, timeout: int = 1200, memory_cap: int | None = SMALL_GPU_BYTES) -> dict:
    """Run every cell of a notebook in a fresh kernel and write outputs plus the stamp."""
    import nbformat

    nb, facts = run(path, timeout=timeout, memory_cap=memory_cap)
    coalesce_streams(nb)
    env = environment()
    nb.metadata[STAMP_KEY] = {
        "code_sha256": code_hash(json.loads(nbformat.writes(nb))),
        "executed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **env,
        **facts,
    }
    nbformat.write(nb, str(path))
    return nb.metadata[STAMP_KEY]
