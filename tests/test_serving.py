"""course.serving: the batching policies, the batcher's bookkeeping, and the HTTP server
under load, with clients that hang up and clients that send garbage.

The HTTP tests serve ``llm.TINY`` (on the GPU when there is one, else on the CPU) and
compare every answer with the same model run on that prompt alone.
"""
import asyncio
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from course import serving
from course.serving import Batcher, batch_one, dynamic

TOL = 1e-3  # logits of a batched forward vs the prompt alone (fp32; order-one logits)
MAX_LEN = 64
N_PROMPTS = 200


def invariant(stats: dict) -> None:
    """Every submitted request is accounted for exactly once, and nothing is left over."""
    assert stats["submitted"] == stats["completed"] + stats["cancelled"] + stats["failed"], stats
    assert stats["queued"] == 0 and stats["running"] == 0, stats


def items_run(stats: dict) -> int:
    return sum(int(size) * count for size, count in stats["batch_sizes"].items())


# --------------------------------------------------------------------------- policies
def test_dynamic_waits_for_a_full_batch_or_the_delay():
    policy = dynamic(4, 0.010)
    assert policy((), 1.0) == 0
    assert policy((1.000,), 1.005) == 0  # one request, young: wait for company
    assert policy((1.000, 1.001, 1.002), 1.009) == 0  # three young ones: still wait
    assert policy((1.000, 1.001, 1.002), 1.010) == 3  # the oldest reached the delay
    assert policy((1.000,), 1.5) == 1
    assert policy((1.000, 1.001, 1.002, 1.003), 1.004) == 4  # full batch: go now
    assert policy(tuple(1.0 + i * 1e-4 for i in range(9)), 1.001) == 4  # never above max
    assert dynamic(1, 10.0)((5.0,), 5.0) == 1
    with pytest.raises(ValueError):
        dynamic(0, 0.01)
    with pytest.raises(ValueError):
        dynamic(4, -1.0)


def test_batch_one_runs_each_request_alone():
    policy = batch_one()
    assert policy((), 0.0) == 0
    assert policy((0.0,), 0.0) == 1
    assert policy(tuple(range(7)), 100.0) == 1


# --------------------------------------------------------------------------- batcher
class Recorder:
    """A fake run_batch: records each batch, answers 10 x item, can fail or block."""

    def __init__(self, fail_on=None, block: threading.Event | None = None):
        self.batches: list[list] = []
        self.fail_on = fail_on
        self.block = block
        self.started = threading.Event()

    def __call__(self, items):
        self.batches.append(list(items))
        self.started.set()
        if self.block is not None:
            assert self.block.wait(10.0)
        if self.fail_on is not None and self.fail_on in items:
            raise ValueError(f"cannot handle {self.fail_on}")
        return [10 * x for x in items]


def test_batcher_forms_batches_by_the_policy():
    async def main():
        rec = Recorder()
        b = Batcher(rec, dynamic(4, 0.05), max_batch=4)
        t0 = time.perf_counter()
        # All ten are queued before the scheduler first looks: two full batches go at
        # once, the last two wait for the delay.
        results = await asyncio.gather(*(b.submit(i) for i in range(10)))
        return rec, b.stats(), results, time.perf_counter() - t0

    rec, stats, results, elapsed = asyncio.run(main())
    assert results == [10 * i for i in range(10)]
    assert rec.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert elapsed >= 0.05
    assert stats["batches"] == 3 and stats["batch_sizes"] == {2: 1, 4: 2}
    assert stats["mean_batch"] == pytest.approx(10 / 3)
    assert stats["completed"] == 10
    invariant(stats)


def test_batcher_with_batch_one_runs_in_order():
    async def main():
        rec = Recorder()
        b = Batcher(rec, batch_one(), max_batch=8)
        results = await asyncio.gather(*(b.submit(i) for i in range(5)))
        return rec, b.stats(), results

    rec, stats, results = asyncio.run(main())
    assert results == [0, 10, 20, 30, 40]
    assert rec.batches == [[0], [1], [2], [3], [4]]
    assert stats["batch_sizes"] == {1: 5} and stats["mean_batch"] == 1.0
    invariant(stats)


def test_batcher_with_sizes_runs_the_positions_the_policy_names():
    """With size_of, the policy sees (arrival, size) pairs and may pick any waiting requests:
    here, all requests of the oldest one's size, so long and short items never share a batch."""
    seen = []

    def same_size(waiting, now):
        seen.append(waiting)
        return [k for k, (_, size) in enumerate(waiting) if size == waiting[0][1]]

    async def main():
        rec = Recorder()
        b = Batcher(rec, same_size, max_batch=8, size_of=lambda x: 1 if x < 100 else 2)
        results = await asyncio.gather(*(b.submit(x) for x in (1, 200, 2, 300, 3)))
        return rec, b.stats(), results

    rec, stats, results = asyncio.run(main())
    assert results == [10, 2000, 20, 3000, 30]
    assert rec.batches == [[1, 2, 3], [200, 300]]
    assert all(isinstance(pair, tuple) and len(pair) == 2 for pair in seen[0])
    invariant(stats)


def test_batcher_clips_the_policy_and_ticks_while_requests_wait():
    calls = []

    def greedy(waiting, now):
        calls.append(len(waiting))
        # Negative (clipped to 0: wait) for the first few calls, then far too many.
        return -3 if len(calls) <= 5 else 100

    async def main():
        rec = Recorder()
        b = Batcher(rec, greedy, max_batch=3, tick_s=0.001)
        results = await asyncio.gather(*(b.submit(i) for i in range(7)))
        return rec, b.stats(), results

    rec, stats, results = asyncio.run(main())
    assert results == [10 * i for i in range(7)]
    assert [len(batch) for batch in rec.batches] == [3, 3, 1]
    # No new arrivals after the first moment: only the tick can have called it again.
    assert len(calls) >= 6
    invariant(stats)


def test_batcher_drops_a_cancelled_request_that_is_still_queued():
    hold = threading.Event()
    hold.set()

    def policy(waiting, now):
        return 0 if hold.is_set() else len(waiting)

    async def main():
        rec = Recorder()
        b = Batcher(rec, policy, max_batch=8)
        tasks = [asyncio.ensure_future(b.submit(i)) for i in range(3)]
        await asyncio.sleep(0.02)
        assert b.stats()["queued"] == 3 and rec.batches == []
        tasks[1].cancel()  # its client went away while it waited
        await asyncio.sleep(0.01)
        assert b.stats()["queued"] == 2 and b.stats()["cancelled"] == 1
        hold.clear()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        return rec, b.stats(), done

    rec, stats, done = asyncio.run(main())
    assert done[0] == 0 and done[2] == 20
    assert isinstance(done[1], asyncio.CancelledError)
    assert rec.batches == [[0, 2]]  # the cancelled item never reached the model
    assert stats["cancelled"] == 1 and stats["completed"] == 2
    invariant(stats)


def test_batcher_discards_the_answer_of_a_request_cancelled_while_running():
    release = threading.Event()

    async def main():
        rec = Recorder(block=release)
        b = Batcher(rec, batch_one(), max_batch=4)
        task = asyncio.ensure_future(b.submit(7))
        while not rec.started.is_set():
            await asyncio.sleep(0.001)
        assert b.stats()["running"] == 1
        task.cancel()
        await asyncio.sleep(0.01)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        while b.stats()["running"]:
            await asyncio.sleep(0.001)
        after = await b.submit(8)  # the batcher goes on serving
        return rec, b.stats(), after

    rec, stats, after = asyncio.run(main())
    assert after == 80
    assert rec.batches == [[7], [8]]
    assert stats["cancelled"] == 1 and stats["completed"] == 1 and stats["failed"] == 0
    invariant(stats)


def test_batcher_fails_only_the_batch_whose_model_call_raised():
    async def main():
        b = Batcher(Recorder(fail_on=13), batch_one(), max_batch=4)
        with pytest.raises(ValueError, match="cannot handle 13"):
            await b.submit(13)
        ok = await b.submit(5)
        wrong = Batcher(lambda items: [], batch_one(), max_batch=4)  # drops its answers
        with pytest.raises(RuntimeError, match="0 results for 1"):
            await wrong.submit(1)

        def broken(waiting, now):
            raise ZeroDivisionError("policy bug")

        bad_policy = Batcher(Recorder(), broken, max_batch=4)
        with pytest.raises(ZeroDivisionError):
            await bad_policy.submit(1)
        return b.stats(), ok, wrong.stats(), bad_policy.stats()

    stats, ok, wrong, bad_policy = asyncio.run(main())
    assert ok == 50
    assert stats["failed"] == 1 and stats["completed"] == 1
    assert wrong["failed"] == 1 and bad_policy["failed"] == 1
    for s in (stats, wrong, bad_policy):
        invariant(s)


# --------------------------------------------------------------------------- the model
@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    # The load generator and the server share the CPU with the model: one intra-op thread
    # keeps torch from spinning against them (two threads on two busy cores ran a forward
    # several times slower than one). The setting is process-wide; restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def device(torch):
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def model(torch, device):
    from course import llm

    return llm.build(llm.TINY, seed=0, device=device)


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(1)
    return [[rng.randrange(1024) for _ in range(rng.randint(1, 48))] for _ in range(N_PROMPTS)]


@pytest.fixture(scope="module")
def reference(torch, model, device, prompts):
    """(top token, its logit, margin to the runner-up) of each prompt run alone."""
    out = []
    with torch.inference_mode():
        for p in prompts:
            logits = model(torch.tensor([p], device=device))[0, -1].float()
            top = torch.topk(logits, 2)
            values = top.values.tolist()
            out.append((int(top.indices[0]), values[0], values[0] - values[1]))
    return out


def check_answers(answers, refs) -> None:
    """Each answer is the prompt-alone answer: same logit; same token where the top two
    logits are far enough apart that rounding cannot swap them."""
    assert len(answers) == len(refs)
    decided = 0
    for i, (answer, (token, logit, margin)) in enumerate(zip(answers, refs)):
        assert answer is not None, f"request {i} got no answer"
        assert abs(answer["logit"] - logit) <= TOL * (1 + abs(logit)), (i, answer, logit)
        if margin > 4 * TOL * (1 + abs(logit)):
            assert answer["token"] == token, (i, answer, token, margin)
            decided += 1
    if len(refs) >= 20:
        assert decided >= 0.8 * len(refs)  # the token check was not vacuous


def test_next_token_matches_each_prompt_alone(model, device, prompts, reference):
    run = serving.NextToken(model, device)
    batch = prompts[:24]  # lengths 1..48: plenty of right padding
    answers = run(batch)
    assert all(isinstance(a["token"], int) and isinstance(a["logit"], float) for a in answers)
    check_answers(answers, reference[:24])


# --------------------------------------------------------------------------- HTTP
@pytest.fixture(scope="module")
def web():
    for name in ("fastapi", "uvicorn", "aiohttp"):
        pytest.importorskip(name)


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def post(url: str, body: bytes):
    req = urllib.request.Request(url + "/v1/next_token", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def settled(b: Batcher) -> bool:
    s = b.stats()
    return s["queued"] == 0 and s["running"] == 0 and \
        s["submitted"] == s["completed"] + s["cancelled"] + s["failed"]


def test_server_answers_correctly_under_load(web, model, device, prompts, reference):
    b = Batcher(serving.NextToken(model, device), dynamic(16, 0.005), max_batch=16)
    with serving.Server(serving.make_app(b, vocab=1024, max_len=MAX_LEN)) as server:
        assert get(server.url + "/health") == (200, {"ok": True})

        closed = serving.run_load(server.url, prompts, concurrency=32)
        print(f"\nclosed loop, 32 clients: {closed.throughput:.0f} req/s, "
              f"p50 {closed.p50_s * 1e3:.1f} ms, p99 {closed.p99_s * 1e3:.1f} ms")
        assert closed.errors == 0 and closed.sent == closed.completed == len(prompts)
        check_answers(closed.answers, reference)
        assert len(closed.latencies_s) == len(prompts) and (closed.latencies_s > 0).all()
        assert 0 < closed.p50_s <= closed.p99_s and closed.throughput > 0
        wait_until(lambda: settled(b))
        stats = b.stats()
        assert stats["completed"] == len(prompts) and stats["mean_batch"] > 1
        assert max(stats["batch_sizes"]) <= 16
        invariant(stats)

        half = prompts[: N_PROMPTS // 2]
        opened = serving.run_load(server.url, half, rate=150.0)
        print(f"open loop, 150 req/s offered: {opened.throughput:.0f} req/s, "
              f"p50 {opened.p50_s * 1e3:.1f} ms, p99 {opened.p99_s * 1e3:.1f} ms, "
              f"mean batch {b.stats()['mean_batch']:.1f}")
        assert opened.errors == 0 and opened.completed == len(half)
        check_answers(opened.answers, reference[: len(half)])
        wait_until(lambda: settled(b))
        code, remote = get(server.url + "/stats")
        assert code == 200 and remote["completed"] == len(prompts) + len(half)
        invariant(remote)


def raw_request(port: int, tokens: list[int]) -> socket.socket:
    """Open a connection and send one request without reading the answer."""
    body = json.dumps({"tokens": tokens}).encode()
    head = (f"POST /v1/next_token HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head + body)
    return sock


def test_server_survives_clients_that_hang_up(web, model, device, prompts, reference):
    hold = threading.Event()  # while set, the policy runs nothing: requests stay queued
    flexible = dynamic(8, 0.02)

    def policy(waiting, now):
        return 0 if hold.is_set() else flexible(waiting, now)

    b = Batcher(serving.NextToken(model, device), policy, max_batch=8)
    normal = prompts[:128]
    n_rude = 32
    with serving.Server(serving.make_app(b, vocab=1024, max_len=MAX_LEN)) as server:
        # Phase 1: clients that send and hang up 0-30 ms later, amid a steady load.
        def rude_clients():
            wait_until(lambda: b.stats()["submitted"] >= 20, timeout_s=30)
            rng = random.Random(2)
            for k in range(n_rude):
                sock = raw_request(server.port, prompts[k % len(prompts)])
                time.sleep(rng.uniform(0.0, 0.03))
                sock.close()

        thread = threading.Thread(target=rude_clients)
        thread.start()
        result = serving.run_load(server.url, normal, concurrency=16)
        thread.join()
        assert result.errors == 0 and result.completed == len(normal)
        check_answers(result.answers, reference[: len(normal)])
        wait_until(lambda: settled(b))
        stats = b.stats()
        print(f"\nafter {n_rude} hang-ups amid the load: {stats}")
        invariant(stats)
        assert stats["failed"] == 0
        # Every polite request completed; each rude one completed, was cancelled, or
        # never got as far as the queue (hung up before its body was read).
        assert len(normal) <= stats["submitted"] <= len(normal) + n_rude
        assert stats["completed"] >= len(normal)

        # Phase 2: requests that are certainly still queued when their clients leave
        # must be dropped without ever reaching the model.
        hold.set()
        try:
            before = b.stats()
            socks = [raw_request(server.port, prompts[k]) for k in range(3)]
            wait_until(lambda: b.stats()["queued"] == 3)
            for sock in socks:
                sock.close()
            wait_until(lambda: b.stats()["queued"] == 0)
        finally:
            hold.clear()
        after = b.stats()
        assert after["cancelled"] == before["cancelled"] + 3
        assert items_run(after) == items_run(before)  # the model never saw them
        invariant(after)

        # And the server still serves.
        assert get(server.url + "/health") == (200, {"ok": True})
        code, answer = post(server.url, json.dumps({"tokens": prompts[5]}).encode())
        assert code == 200
        check_answers([answer], reference[5:6])
        wait_until(lambda: settled(b))
        invariant(b.stats())


@pytest.mark.parametrize("body", [
    b"this is not json",
    b'{"tokens": []}',
    b'{"tokens": [1024]}',
    b'{"tokens": [-1]}',
    json.dumps({"tokens": [1] * (MAX_LEN + 1)}).encode(),
    b'{"tokens": [1.5]}',
    b'{"tokens": ["3"]}',
    b'{"tokens": [true]}',
    b'{"tokens": 5}',
    b'{"ids": [1, 2]}',
    b"[1, 2, 3]",
], ids=["not-json", "empty", "vocab", "negative", "too-long", "float", "string", "bool",
        "not-a-list", "no-tokens-key", "not-an-object"])
def test_server_rejects_bad_input_and_keeps_serving(web, model, device, prompts, reference, body):
    b = Batcher(serving.NextToken(model, device), batch_one(), max_batch=1)
    with serving.Server(serving.make_app(b, vocab=1024, max_len=MAX_LEN)) as server:
        code, answer = post(server.url, body)
        assert code == 422, answer
        assert isinstance(answer["detail"], str) and answer["detail"]
        code, answer = post(server.url, json.dumps({"tokens": prompts[0]}).encode())
        assert code == 200
        check_answers([answer], reference[:1])
        stats = b.stats()
        assert stats["submitted"] == 1  # the bad request never reached the batcher
        invariant(stats)


def test_server_reports_a_failing_model_and_keeps_serving(web):
    def run_batch(prompts):
        if any(13 in p for p in prompts):
            raise ValueError("cannot handle 13")
        return [{"token": p[0], "logit": 0.5} for p in prompts]

    b = Batcher(run_batch, batch_one(), max_batch=1)
    with serving.Server(serving.make_app(b, vocab=100, max_len=8)) as server:
        code, answer = post(server.url, b'{"tokens": [13]}')
        assert code == 500 and "cannot handle 13" in answer["detail"]
        code, answer = post(server.url, b'{"tokens": [4]}')
        assert (code, answer) == (200, {"token": 4, "logit": 0.5})
        stats = b.stats()
        assert stats["failed"] == 1 and stats["completed"] == 1
        invariant(stats)


def test_run_load_needs_exactly_one_mode():
    with pytest.raises(ValueError):
        serving.run_load("http://127.0.0.1:9", [[1]])
    with pytest.raises(ValueError):
        serving.run_load("http://127.0.0.1:9", [[1]], rate=10.0, concurrency=2)
