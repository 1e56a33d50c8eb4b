"""The grader's block-parallel host maths: BLAS held to one thread while blocks run on every core,
given back afterwards, and the results the same as NumPy's own."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from autograder import host_parallel
from autograder.host_parallel import matmul64, one_blas_thread, parallel_map
from autograder.spec import NORMAL_CHUNK, standard_normal


def blas_threads() -> set[int]:
    return {m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas"}


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr(host_parallel, "cores", lambda: 4)


@pytest.fixture
def two_blas_threads():
    if not blas_threads():
        pytest.skip("NumPy's BLAS is not one threadpoolctl can see")
    with threadpool_limits(limits=2, user_api="blas"):
        assert blas_threads() == {2}
        yield


def test_blocks_run_on_several_threads_with_one_blas_thread_each(four_cores, two_blas_threads):
    seen = []
    barrier = threading.Barrier(4, timeout=20)  # passes only if four jobs run at once

    def job(i):
        barrier.wait()
        seen.append((threading.get_ident(), blas_threads()))
        return i * i

    assert parallel_map(job, range(4)) == [0, 1, 4, 9]
    assert len({ident for ident, _ in seen}) == 4
    assert all(threads == {1} for _, threads in seen)
    assert blas_threads() == {2}  # given back


def test_the_main_threads_limit_lets_another_threads_blocks_run_in_parallel(four_cores, two_blas_threads):
    """The judge holds the limit on its main thread while a background thread draws the next
    exercise's inputs and their reference: those blocks run in parallel, BLAS on one thread."""
    seen = {}

    def draw(label):
        idents = set()
        seen[label] = idents

        def job(i):
            idents.add(threading.get_ident())
            assert blas_threads() == {1}, "a block ran with a multi-threaded BLAS"
            threading.Event().wait(0.05)  # long enough for the jobs to overlap
            return i

        assert parallel_map(job, range(8)) == list(range(8))

    with one_blas_thread():
        t = threading.Thread(target=draw, args=("under the judge's limit",))
        t.start()
        t.join(30)
    assert len(seen["under the judge's limit"]) > 1
    assert blas_threads() == {2}


def test_without_the_main_threads_limit_another_thread_runs_its_blocks_one_by_one(four_cores, two_blas_threads):
    idents = set()

    def job(i):
        idents.add(threading.get_ident())
        return blas_threads()

    result = []
    t = threading.Thread(target=lambda: result.extend(parallel_map(job, range(8))))
    t.start()
    t.join(30)
    assert result == [{2}] * 8 and len(idents) == 1
    assert blas_threads() == {2}


def test_nested_limits_give_blas_back_only_at_the_outermost_exit(two_blas_threads):
    with one_blas_thread():
        with one_blas_thread():
            assert blas_threads() == {1}
        assert blas_threads() == {1}
    assert blas_threads() == {2}


def test_a_failing_block_still_gives_blas_back(four_cores, two_blas_threads):
    def job(i):
        if i == 2:
            raise ValueError("block 2")
        return i

    with pytest.raises(ValueError, match="block 2"):
        parallel_map(job, range(4))
    assert blas_threads() == {2}


@pytest.mark.parametrize("m", [1, 255, 256, 700])
def test_matmul64_is_numpys_product(four_cores, m):
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, 33)), rng.standard_normal((33, 17))
    np.testing.assert_allclose(matmul64(a, b), a @ b, rtol=1e-13, atol=1e-13)


def test_standard_normal_is_the_same_on_any_number_of_cores(monkeypatch):
    shape = (3, NORMAL_CHUNK)
    monkeypatch.setattr(host_parallel, "cores", lambda: 1)
    one = standard_normal(np.random.default_rng(7), shape)
    monkeypatch.setattr(host_parallel, "cores", lambda: 3)
    three = standard_normal(np.random.default_rng(7), shape)
    assert one.shape == shape and np.array_equal(one, three)
    assert abs(float(one.std()) - 1.0) < 1e-2
