"""course.dist: a function run on several processes from a notebook, gloo on the CPU or NCCL on
two GPUs, and failures reported with the processes' own messages."""
from __future__ import annotations

import pytest

from course import dist

torch = pytest.importorskip("torch")


def _ranks_sum(rank, n=3):
    import torch
    import torch.distributed as d

    t = torch.full((n,), float(rank.rank + 1), device=rank.device)
    d.all_reduce(t)
    return {"rank": rank.rank, "world": rank.world, "backend": rank.backend, "sum": t[:4].tolist(),
            "all_same": bool((t == t[0]).all())}


def _fails_on_rank_one(rank):
    if rank.rank == 1:
        raise ValueError("rank one refuses")
    return rank.rank


def test_launch_returns_each_ranks_result_in_rank_order():
    results = dist.launch("shipped:_ranks_sum", nprocs=2, ship=[_ranks_sum], n=4)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == [3.0] * 4 and r["all_same"] for r in results)
    assert results[0]["backend"] == dist.backend_for(2)


def test_a_failing_rank_raises_with_its_message():
    with pytest.raises(RuntimeError, match="rank one refuses"):
        dist.launch("shipped:_fails_on_rank_one", nprocs=2, ship=[_fails_on_rank_one], timeout_s=120)


def test_targets_are_module_colon_function():
    with pytest.raises(ValueError, match="module:function"):
        dist.launch("course.collectives.sweep")


def test_unshippable_functions_are_refused_clearly():
    with pytest.raises(ValueError, match="cannot ship"):
        dist.launch("shipped:len", ship=[len])


def test_backend_needs_one_gpu_per_process():
    assert dist.backend_for(dist.usable_gpus() + 1) == "gloo"


@pytest.mark.gpu
@pytest.mark.multigpu
def test_nccl_on_two_gpus_sums_and_times():
    results = dist.launch("shipped:_ranks_sum", nprocs=2, ship=[_ranks_sum], n=1 << 20)
    assert [r["backend"] for r in results] == ["nccl", "nccl"]
    assert all(r["sum"] == [3.0] * 4 and r["all_same"] for r in results)
