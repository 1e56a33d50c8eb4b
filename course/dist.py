"""Running one function on several processes, one per GPU, from a notebook (Part IV).

Multi-GPU code in PyTorch runs as one process per GPU, started by ``torchrun``. A notebook
cannot be those processes, so it starts them and collects what they return::

    results = dist.launch("course.collectives:sweep", nprocs=2, sizes=[1 << 20])

Each process calls ``sweep(rank, sizes=[...])``, where ``rank`` is a :class:`Rank` (who am I,
how many are we, which device), and ``launch`` returns the list of their return values (JSON),
indexed by rank.

With at least ``nprocs`` GPUs the processes talk through NCCL, one GPU each. Otherwise they
use gloo on the CPU: the same code then runs anywhere (CI, a laptop), only slower, so the
chapters can check every multi-process result without a GPU and measure speed only with one.

``ship=[f, g]`` sends functions defined in the notebook along: their source is written to a
module the processes import as ``rank.shipped``, so a learner's function runs on real ranks.
A target "shipped:f" names one of them.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

from .device import gpu_count, simulator_requested

ROOT = Path(__file__).resolve().parent.parent


def usable_gpus() -> int:
    """GPUs this process may use: none in simulator mode, whatever the driver reports."""
    return 0 if simulator_requested() else gpu_count()


def backend_for(nprocs: int) -> str:
    """NCCL when every process can have its own GPU, gloo on the CPU otherwise. (NCCL refuses
    two ranks on one GPU.)"""
    return "nccl" if usable_gpus() >= nprocs else "gloo"


@dataclass
class Rank:
    """What one process knows about its place in the group."""

    rank: int
    world: int
    device: Any  # torch.device: cuda:<local rank> under NCCL, cpu under gloo
    backend: str
    shipped: ModuleType | None = None  # the notebook's functions sent with ship=

    @property
    def on_gpu(self) -> bool:
        return self.backend == "nccl"

    def sync(self) -> None:
        """Wait for this process's GPU work (a no-op on the CPU)."""
        if self.on_gpu:
            import torch

            torch.cuda.synchronize(self.device)


def time_per_call(rank: Rank, fn: Callable[[], Any], iters: int = 20, warmup: int = 5) -> float:
    """Mean seconds per ``fn()`` over ``iters`` calls made back to back, after ``warmup`` calls,
    all ranks starting together (a barrier). The slowest rank's time is returned on every rank,
    as a collective is only done when the last rank is."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        fn()
    rank.sync()
    dist.barrier()
    if rank.on_gpu:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        seconds = start.elapsed_time(stop) / 1e3 / iters
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        seconds = (time.perf_counter() - t0) / iters
    return slowest(rank, seconds)


def slowest(rank: Rank, seconds: float) -> float:
    """The largest of every rank's ``seconds``, on every rank (a MAX all-reduce)."""
    import torch
    import torch.distributed as dist

    longest = torch.tensor([seconds], dtype=torch.float64, device=rank.device)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)
    return float(longest.item())


def _shipped_source(functions: Sequence[Callable]) -> str:
    parts = ["import math\nimport numpy as np\nimport torch\nimport torch.distributed as dist\n"
             "import torch.nn.functional as F\n"]
    for f in functions:
        try:
            parts.append(textwrap.dedent(inspect.getsource(f)))
        except (OSError, TypeError) as e:
            raise ValueError(f"cannot ship {f!r}: its source is not available ({e})") from None
    return "\n\n".join(parts)


def launch(target: str, nprocs: int = 2, ship: Sequence[Callable] = (), backend: str | None = None,
           timeout_s: float = 600, **kwargs) -> list:
    """Run ``target`` ("package.module:function") on ``nprocs`` processes under torchrun and
    return each rank's return value. Keyword arguments must be JSON values; so are results.

    Raises RuntimeError with the processes' last output if any of them fails.
    """
    if ":" not in target:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    backend = backend or backend_for(nprocs)
    with tempfile.TemporaryDirectory(prefix="course-dist-") as tmp:
        d = Path(tmp)
        if ship:
            (d / "shipped.py").write_text(_shipped_source(ship))
        (d / "call.json").write_text(json.dumps({"target": target, "backend": backend, "kwargs": kwargs}))
        env = dict(os.environ, COURSE_DIST_DIR=str(d),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default, without its warning
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={nprocs}", "--module", "course.dist"]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{target} on {nprocs} processes did not finish in {timeout_s:.0f} s") from None
        missing = [r for r in range(nprocs) if not (d / f"rank{r}.json").exists()]
        if proc.returncode != 0 or missing:
            # Each failing rank wrote its own traceback: torchrun's summary can bury it.
            errors = "".join(f"rank {r}:\n{(d / f'rank{r}.error').read_text()}" for r in range(nprocs)
                             if (d / f"rank{r}.error").exists())
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise RuntimeError(f"{target} failed on {nprocs} processes ({backend}), exit status "
                               f"{proc.returncode}:\n{errors or tail}")
        if proc.stdout.strip():
            print(proc.stdout.rstrip())
        return [json.loads((d / f"rank{r}.json").read_text()) for r in range(nprocs)]


def _load_shipped(d: Path) -> ModuleType | None:
    path = d / "shipped.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("shipped", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker() -> None:
    """One process started by launch(): join the group, call the target, write its result."""
    import torch
    import torch.distributed as dist

    d = Path(os.environ["COURSE_DIST_DIR"])
    call = json.loads((d / "call.json").read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if call["backend"] == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    shipped = _load_shipped(d)
    module, _, name = call["target"].partition(":")
    fn = getattr(shipped if module == "shipped" else importlib.import_module(module), name)
    try:
        result = fn(Rank(rank, world, device, call["backend"], shipped), **call["kwargs"])
        (d / f"rank{rank}.json.tmp").write_text(json.dumps(result))
        os.replace(d / f"rank{rank}.json.tmp", d / f"rank{rank}.json")
    except BaseException:
        (d / f"rank{rank}.error").write_text(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _worker()
