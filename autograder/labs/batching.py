"""Lab: batching. The learner writes the policy of a dynamic batcher for prompts of different
lengths: given the requests waiting (arrival time, prompt length) and the time now, which of
them to run together as the next batch.

The engine pads every prompt of a batch to the longest one, so a batch costs time in
proportion to (requests x longest prompt): mixing a short prompt with a long one wastes work.
The policy is graded by simulation against the engine's measured cost model, on arrival
traces drawn from the grading run's secret seed. Correctness: every request is served, and at
a light load the 99th-percentile latency meets the bound. Speed: the highest arrival rate at
which the p99 latency stays within the bound (the policy's capacity), over the reference
policy's capacity on the same traces. The worker only simulates; the parent checks the record
it sends back (causal, one batch at a time, every request exactly once, within the batch
limits) and computes every latency itself.
"""
from __future__ import annotations

import bisect
import math

import numpy as np

from course.llm import LLAMA2_7B

from .. import capacity as cap_search
from ..spec import Assessment, Exercise, Lab, Speed

# The engine's cost model: a batch of b prompts padded to the longest, L tokens, takes
# T0_S + T_TOKEN_S * b * L seconds. The constants come from the fit that the lab's solution
# notebook prints for ENGINE_MODEL (Step 1), run on two H200 machines with 15 GB of memory free.
# t_token, the GPU's work, was 15.1 to 16.4 us in all four runs. t0 is mostly the host's time to
# launch the model's kernels one by one, so it depends on the host: 5.4 and 5.6 ms on one
# machine, 11.5 and 12.1 ms on the other. T0_S sits between them; the notebook accepts a fit
# within a factor of 2 of it, and within 30% of T_TOKEN_S.
T0_S = 8.5e-3
T_TOKEN_S = 16e-6
# The model the constants were measured on: the Llama 2 7B shape with 20 layers (8.6 GB of bf16
# weights, so that it runs on a 16 GB GPU), served by chapter 13's NextToken.
ENGINE_MODEL = LLAMA2_7B.scaled(n_layers=20)
MAX_BATCH = 64  # prompts per batch
MAX_TOKENS = 8192  # b * L per batch: the engine's activation memory is sized for this
# The service-level objective: the 99th percentile of request latency (arrival to answer), set
# at 1.5x the time of one batch that fills the whole token budget.
BOUND_S = round(1.5 * (T0_S + T_TOKEN_S * MAX_TOKENS), 3)
# Prompt lengths: 70% chat turns of 8 to 32 tokens, 30% documents of 128 to 512 tokens.
SHORT, LONG, SHARE_SHORT = (8, 32), (128, 512), 0.7
TICK_S = 0.5e-3  # while requests wait and the engine is idle, the policy is asked this often
N_REQUESTS = 3000  # per trace
RATE_STEP = 1.06  # the ladder of arrival rates: each 6% above the last
GIVE_UP_S = 5.0  # simulated time after the last arrival before unserved requests count as lost


def batch_seconds(tokens: list[int] | tuple[int, ...]) -> float:
    """How long the engine takes for one batch of prompts with these lengths (cost model)."""
    return T0_S + T_TOKEN_S * len(tokens) * max(tokens)


# --------------------------------------------------------------------------- simulation
def _picked(answer, waiting) -> list[int]:
    """The positions in ``waiting`` a policy's answer names, checked against the engine's limits."""
    if isinstance(answer, (int, np.integer)) and not isinstance(answer, bool):
        answer = range(int(answer))  # "the k oldest"
    try:
        picked = sorted({int(k) for k in answer})
    except (TypeError, ValueError):
        raise TypeError(f"schedule must return positions in `waiting` (a list of ints), not {answer!r}") from None
    if picked and (picked[0] < 0 or picked[-1] >= len(waiting)):
        raise IndexError(f"schedule returned position {picked[0] if picked[0] < 0 else picked[-1]}, "
                         f"but only {len(waiting)} requests wait (positions 0 to {len(waiting) - 1})")
    if len(picked) > MAX_BATCH:
        raise ValueError(f"a batch of {len(picked)} prompts: the engine takes at most MAX_BATCH = {MAX_BATCH}")
    longest = max((waiting[k][1] for k in picked), default=0)
    if len(picked) * longest > MAX_TOKENS:
        raise ValueError(f"a batch of {len(picked)} prompts padded to {longest} tokens is "
                         f"{len(picked) * longest} tokens: the engine takes at most MAX_TOKENS = {MAX_TOKENS}")
    return picked


def run_trace(policy, arrivals, tokens) -> dict[str, np.ndarray]:
    """Run ``policy`` on one trace; return when each batch started, its size, and which
    requests (by arrival order) it served.

    The engine runs one batch at a time. Whenever it is idle and requests wait, the policy is
    called as ``policy(waiting, now)``, where ``waiting`` is a tuple of (arrival time, prompt
    length) pairs, oldest first: at each arrival, when a batch ends, and every TICK_S.
    """
    arrivals = np.asarray(arrivals, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(arrivals)
    queue: list[int] = []  # request numbers, oldest first
    starts, sizes, served = [], [], []
    now, i = 0.0, 0
    give_up = float(arrivals[-1]) + GIVE_UP_S if n else 0.0
    late, over = 0, n // 100 + 1  # requests known to miss the bound; p99 misses it past 1%
    while i < n or queue:
        # The queue holds request numbers in arrival order: those before `cut` waited too long.
        cut = int(np.searchsorted(arrivals, now - BOUND_S))
        if late + bisect.bisect_left(queue, cut) >= over:
            # Decided: more than 1% of requests miss the bound. Stop, so overloaded traces
            # cost no more time; the parent re-derives the verdict from the record.
            return _record(starts, sizes, served, stop=now)
        if not queue:
            now = max(now, float(arrivals[i]))
        while i < n and arrivals[i] <= now:
            queue.append(i)
            i += 1
        waiting = tuple((float(arrivals[j]), int(tokens[j])) for j in queue)
        picked = _picked(policy(waiting, now), waiting)
        if picked:
            batch = [queue[k] for k in picked]
            starts.append(now)
            sizes.append(len(batch))
            served += batch
            for k in reversed(picked):
                queue.pop(k)
            now += batch_seconds([int(tokens[j]) for j in batch])
            late += sum(now - arrivals[j] > BOUND_S for j in batch)
        else:
            next_arrival = float(arrivals[i]) if i < n else math.inf
            now = min(next_arrival, now + TICK_S)
            if now > give_up:
                break
    return _record(starts, sizes, served)


def _record(starts, sizes, served, stop=None) -> dict[str, np.ndarray]:
    return {"start": np.array(starts, dtype=np.float64), "size": np.array(sizes, dtype=np.int64),
            "served": np.array(served, dtype=np.int64),
            "stop": np.array([] if stop is None else [stop], dtype=np.float64)}


def latencies(arrivals, tokens, record) -> tuple[np.ndarray, str]:
    """Every request's latency (inf if never served) from a record, after checking that the
    record could have happened. Returns (latencies, problem); problem is "" when valid."""
    n = len(arrivals)
    start = np.asarray(record.get("start", ()), dtype=np.float64)
    size = np.asarray(record.get("size", ()), dtype=np.int64)
    served = np.asarray(record.get("served", ()), dtype=np.int64)
    if start.ndim != 1 or start.shape != size.shape or served.ndim != 1 or int(size.sum()) != served.size:
        return np.array([]), "malformed record"
    if served.size and (served.min() < 0 or served.max() >= n or np.unique(served).size != served.size):
        return np.array([]), "a request was served twice, or one that never arrived"
    lat = np.full(n, np.inf)
    free_at = -math.inf
    for s, batch in zip(start, np.split(served, np.cumsum(size)[:-1])):
        if not 1 <= batch.size <= MAX_BATCH or batch.size * tokens[batch].max() > MAX_TOKENS:
            return np.array([]), "a batch over the engine's limits"
        if s < free_at - 1e-12:
            return np.array([]), "a batch started before the previous one ended"
        if s < arrivals[batch].max() - 1e-12:
            return np.array([]), "a batch started before its requests arrived"
        free_at = s + batch_seconds(tokens[batch].tolist())
        lat[batch] = free_at - arrivals[batch]
    stop = np.asarray(record.get("stop", ()), dtype=np.float64)
    if stop.size:  # the simulation stopped early: the waits so far must prove p99 > BOUND_S
        unserved = ~np.isfinite(lat) & (arrivals <= stop[0])
        late = int(np.sum(lat[np.isfinite(lat)] > BOUND_S) + np.sum(stop[0] - arrivals[unserved] > BOUND_S))
        if stop[0] < free_at - 1e-12 or late <= n // 100:
            return np.array([]), "the record stops before every request was served"
        lat[~np.isfinite(lat)] = np.nan  # unknown, but the p99 is over the bound either way
    return lat, ""


# --------------------------------------------------------------------------- the reference
def _bucket(length: int) -> int:
    """Lengths 2^(k-1) < L <= 2^k share bucket k: padding within a bucket is under 2x."""
    return (int(length) - 1).bit_length()


def reference_schedule(waiting, now) -> list[int]:
    """The oldest request goes now, with the oldest others of its length bucket, as many as
    the batch limits allow. Similar lengths waste little padding; serving the oldest first
    keeps every request's wait bounded."""
    bucket = _bucket(waiting[0][1])
    picked, longest = [], 0
    for k, (_, length) in enumerate(waiting):
        if _bucket(length) != bucket:
            continue
        if len(picked) + 1 > MAX_BATCH or (len(picked) + 1) * max(longest, length) > MAX_TOKENS:
            break
        picked.append(k)
        longest = max(longest, length)
    return picked


# --------------------------------------------------------------------------- grading
def _ideal_rate() -> float:
    """Requests per second if every batch filled the token budget with no padding: an upper
    bound no policy reaches, used to place the ladder of rates."""
    mean_tokens = SHARE_SHORT * sum(SHORT) / 2 + (1 - SHARE_SHORT) * sum(LONG) / 2
    return MAX_TOKENS / mean_tokens / (T0_S + T_TOKEN_S * MAX_TOKENS)


def ladder() -> np.ndarray:
    """The arrival rates a policy is tried at, lowest first, each RATE_STEP above the last."""
    return cap_search.ladder(0.05 * _ideal_rate(), _ideal_rate(), RATE_STEP)


def trace(rate: float, n: int = N_REQUESTS, rng: np.random.Generator | None = None) -> dict:
    """Poisson arrivals at ``rate`` requests per second, with prompt lengths drawn as the
    grader draws them: {"arrivals": seconds, "tokens": lengths}."""
    base = _inputs({"n": n}, rng if rng is not None else np.random.default_rng())
    return {"arrivals": base["arrivals"] / rate, "tokens": base["tokens"]}


def _inputs(p, rng) -> dict:
    """One base trace: arrivals at one request per second, and prompt lengths. Every rate of
    the ladder plays the same trace, sped up, so a policy's p99 changes smoothly with rate."""
    n = p["n"]
    short = rng.random(n) < SHARE_SHORT
    tokens = np.where(short, rng.integers(SHORT[0], SHORT[1] + 1, n), rng.integers(LONG[0], LONG[1] + 1, n))
    return {"arrivals": np.cumsum(rng.exponential(1.0, n)), "tokens": tokens.astype(np.int64)}


def _cases(simulator: bool) -> list[dict]:
    # Three independent base traces; two in simulator mode, where every decision is a round trip to
    # the learner's runner on a CPU shared with everything else (the same policy, two thirds the time).
    return [{"trace": k, "n": N_REQUESTS} for k in range(2 if simulator else 3)]


def p99(lat: np.ndarray) -> float:
    """The 99th percentile of latencies; NaN entries (a run stopped early) count as over."""
    if lat.size == 0 or np.isnan(lat).any():
        return math.inf
    return float(np.percentile(lat, 99))


def simulate(policy, params, inputs) -> dict[str, np.ndarray]:
    """The grader's run of one case: the base trace at rates of the ladder, played faster
    and faster. The lightest rate first; then a bisection for the last rate whose p99 is
    within the bound (the p99 grows with the rate: the same trace, sped up). The records of
    the rates tried are concatenated; ``rung`` says which rate each batch belongs to."""
    rates = ladder()
    records, tried = [], []

    def within(rung: int) -> bool:
        arrivals = inputs["arrivals"] / rates[rung]
        record = run_trace(policy, arrivals, inputs["tokens"])
        lat, problem = latencies(arrivals, inputs["tokens"], record)
        record["rung"] = np.full(record["size"].shape, rung, dtype=np.int64)
        record["stop"] = np.append(record["stop"], np.nan)[:1]  # one entry per rung: NaN if complete
        records.append(record)
        tried.append(rung)
        return not problem and p99(lat) <= BOUND_S

    cap_search.search(len(rates), within)
    out = {k: np.concatenate([r[k] for r in records]) for k in records[0]}
    out["tried"] = np.array(tried, dtype=np.int64)
    return out


def _split(record: dict) -> dict[int, dict]:
    """The concatenated record of a case, cut back into one record per rung tried."""
    rung = np.asarray(record["rung"], dtype=np.int64)
    size = np.asarray(record["size"], dtype=np.int64)
    start = np.asarray(record["start"], dtype=np.float64)
    served = np.split(np.asarray(record["served"], dtype=np.int64), np.cumsum(size)[:-1]) if size.size else []
    tried = np.asarray(record.get("tried", []), dtype=np.int64)
    stops = np.asarray(record["stop"], dtype=np.float64)
    out = {}
    for i, k in enumerate(tried):
        mine = np.flatnonzero(rung == k)
        out[int(k)] = {"start": start[mine], "size": size[mine],
                       "served": np.concatenate([served[j] for j in mine]) if mine.size else np.array([], np.int64),
                       "stop": stops[i:i + 1][~np.isnan(stops[i:i + 1])]}
    return out


def _capacity_of_case(inputs, record) -> tuple[float, float, str]:
    """Capacity on one base trace: the rate where the p99 crosses the bound, interpolated
    between the highest rung tried within it and the rung above it. Also the p99 at the
    lightest rate, and a problem ("" when every record is valid)."""
    rates = ladder()
    per_rung = _split(record)
    p99s = {}
    for k, rec in sorted(per_rung.items()):
        lat, problem = latencies(inputs["arrivals"] / rates[k], inputs["tokens"], rec)
        if not problem and np.isinf(lat).any():
            problem = (f"{int(np.isinf(lat).sum())} requests never served at {rates[k]:.0f} requests/s "
                       f"(your policy kept them waiting {GIVE_UP_S:g} s after the last arrival)")
        if problem:
            return 0.0, math.inf, problem
        p99s[k] = p99(lat)
    return cap_search.crossing(rates, RATE_STEP, p99s, BOUND_S), p99s.get(0, math.inf), ""


def capacity(cases, records) -> tuple[float, list[float], list[float], list[str]]:
    """The geometric mean of the capacities of the cases; each case's capacity, its p99 at
    the lightest rate, and its problem ("" when its record is valid)."""
    caps, lightest, problems = [], [], []
    for (_, inputs), record in zip(cases, records):
        cap, light, problem = _capacity_of_case(inputs, record)
        caps.append(cap)
        lightest.append(light)
        problems.append(problem)
    return cap_search.geometric_mean(caps), caps, lightest, problems


def _reference_capacity(cases):
    return capacity(cases, [simulate(reference_schedule, p, i) for p, i in cases])


def assess(cases, records) -> Assessment:
    cap, caps, lightest, problems = capacity(cases, records)
    ref, ref_caps, _, _ = cap_search.of_reference(cases, _reference_capacity)
    bound = f"{BOUND_S * 1e3:.0f} ms"
    lines = []
    for (params, _), c, r, light, problem in zip(cases, caps, ref_caps, lightest, problems):
        where = f"trace {params['trace']}"
        if problem:
            lines.append(f"FAIL {where}: {problem}")
        elif not light <= BOUND_S:
            lines.append(f"FAIL {where}: at the lightest rate, {ladder()[0]:.0f} requests/s, the p99 "
                         f"latency is over the {bound} bound")
        else:
            lines.append(f"pass {where}: p99 within {bound} up to {c:.0f} requests/s "
                         f"(reference policy: {r:.0f})")
    ratio = cap / ref if ref else None
    return cap_search.verdict(
        cases, lines,
        f"every request served; p99 within the {bound} bound up to {cap:.0f} requests/s "
        f"(geometric mean of {len(cases)} traces)",
        ratio, f"capacity {cap:.0f} requests/s at p99 <= {bound}; the reference policy's {ref:.0f} "
               f"requests/s: {ratio or 0:.2f}x")


# The reference policy is the yardstick, not an answer. (Nothing else needs forbidding: the
# simulation runs in the grader's parent process, so the policy cannot see future arrivals.)
NOT_THE_REFERENCE = ("*.reference_schedule", "reference_schedule")

LAB = Lab(
    name="batching",
    title="Lab 12: batching",
    setup="import math\nimport numpy as np\n",
    # What answers may use as engine.NAME in the sandbox (the notebook imports this module).
    engine=("T0_S", "T_TOKEN_S", "MAX_BATCH", "MAX_TOKENS", "BOUND_S", "SHORT", "LONG", "SHARE_SHORT",
            "TICK_S", "N_REQUESTS", "batch_seconds"),
    exercises=(
        Exercise(
            name="schedule",
            title="A dynamic batching policy: throughput under a p99 latency bound",
            backend="numba",  # unused: nothing runs on a device
            args=("waiting", "now"),
            inputs=_inputs,
            outputs={},
            reference=lambda **_: {},
            cases=_cases,
            points=2,
            # Capacities are interpolated where the p99 crosses the bound, on the same three
            # traces for both policies; across seeds a policy's ratio moves by a few percent.
            speed=Speed(3, full_at=0.95, zero_at=0.5),
            forbidden=NOT_THE_REFERENCE,
            simulate=simulate,
            assess=assess,
        ),
    ),
)
