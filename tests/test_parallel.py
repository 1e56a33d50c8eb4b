"""course.parallel: the bubble formula against the schedule simulator, and the two-process
pipeline (checked under gloo on the CPU)."""
from __future__ import annotations

import pytest

from course import parallel


@pytest.mark.parametrize("kind", ["forward", "gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (2, 8), (4, 8), (8, 3)])
def test_simulated_bubble_equals_the_formula(kind, p, m):
    sim = parallel.schedule(kind, p, m, t_f=1.0, t_b=2.0)
    assert sim["bubble"] == pytest.approx(parallel.bubble_fraction(p, m))
    per_microbatch = 1.0 if kind == "forward" else 3.0
    assert sim["makespan"] == pytest.approx((m + p - 1) * per_microbatch)


def test_1f1b_bounds_the_activations_gpipe_keeps():
    p, m = 4, 16
    assert parallel.schedule("gpipe", p, m)["peak_in_flight"] == [m] * p
    assert parallel.schedule("1f1b", p, m)["peak_in_flight"] == [p - s for s in range(p)]


def test_two_process_pipeline_gives_the_whole_models_logits():
    from course import dist, llm

    first, last = dist.launch("course.parallel:pipeline_check", nprocs=2)
    assert first["max_diff"] == {} and first["layers"] + last["layers"] == llm.TINY.n_layers
    assert sorted(int(m) for m in last["max_diff"]) == [1, 2, 4]
    assert max(last["max_diff"].values()) < 1e-4  # as the chapter: float32 products of other shapes on a GPU


def test_pipeline_timing_reports_every_micro_batch_count():
    from course import dist

    small = dict(d_model=64, d_ff=128, n_heads=4, n_kv_heads=4, vocab=100)
    out = dist.launch("course.parallel:pipeline_timing", nprocs=2, n_layers=2, batch=4, seq=8,
                      micro_batches=[1, 2, 4], iters=2, warmup=1, shape=small)
    assert out[0] == out[1]  # every time is the slowest rank's, the same on both
    assert [c["micro_batches"] for c in out[0]["cases"]] == [1, 2, 4]
    assert all(c["stage"] > 0 and c["queue"] > 0 and c["pipeline"] > 0 for c in out[0]["cases"])
