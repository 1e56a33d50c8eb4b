"""course.collectives: the ring cost model, bus bandwidth as nccl-tests defines it, the fit, and
the sweep worker (checked under gloo on the CPU)."""
from __future__ import annotations

import math

import pytest

from course import collectives as C


def test_bus_factor_follows_nccl_tests():
    for k in (2, 4, 8):
        assert C.bus_factor("all_reduce", k) == pytest.approx(2 * (k - 1) / k)
        for op in ("all_gather", "reduce_scatter", "all_to_all"):
            assert C.bus_factor(op, k) == pytest.approx((k - 1) / k)
        assert C.bus_factor("broadcast", k) == C.bus_factor("reduce", k) == 1
    with pytest.raises(ValueError):
        C.bus_factor("scatter_gather", 2)


def test_pipelining_a_chain_tends_to_one_transfer():
    n, k, bw = 1 << 30, 8, 100e9
    assert C.pipelined_broadcast_time(n, k, bw, 1) == pytest.approx(C.chain_broadcast_time(n, k, bw))
    assert C.pipelined_broadcast_time(n, k, bw, 10**6) == pytest.approx(n / bw, rel=1e-4)


def test_ring_all_reduce_on_two_ranks_moves_the_buffer_once():
    assert C.ring_allreduce_time(1 << 20, 2, 1e9) == pytest.approx((1 << 20) / 1e9)
    assert C.ring_allreduce_time(0, 4, 1e9, alpha=5e-6) == pytest.approx(6 * 5e-6)


@pytest.mark.parametrize("k", [2, 4])
def test_fit_recovers_the_model(k):
    sizes = [2 ** e for e in range(10, 31, 2)]
    alpha, bw = 8e-6, 300e9
    got_alpha, got_bw = C.fit_ring(sizes, [C.ring_allreduce_time(n, k, bw, alpha) for n in sizes], k)
    assert got_alpha == pytest.approx(alpha, rel=1e-3) and got_bw == pytest.approx(bw, rel=1e-3)
    got_alpha, got_bw = C.fit_ring(sizes, [C.ring_allreduce_time(n, k, bw) for n in sizes], k)
    assert got_alpha == pytest.approx(0, abs=1e-12) and got_bw == pytest.approx(bw, rel=1e-3)


def test_sweep_checks_and_reports_every_op_under_gloo():
    from course import dist

    ops = list(C.OPS)
    results = dist.launch("course.collectives:sweep", nprocs=2, op=ops, sizes=[1000, 4096], iters=2, warmup=1)
    assert [(r["op"], r["bytes"]) for r in results[0]] == [(r["op"], r["bytes"]) for r in results[1]]
    assert len(results[0]) == 2 * len(ops)
    for r in results[0]:
        assert math.isclose(r["busbw"], r["algbw"] * C.bus_factor(r["op"], 2))
        assert r["seconds"] > 0
