"""Lab: inflight_batching. The learner writes the admission policy of an engine that batches
at the level of iterations (in-flight or continuous batching, as in Orca, TensorRT-LLM and
vLLM): before every iteration, which waiting requests join the running batch.

Each iteration, every running request decodes one token; requests admitted at this iteration
first run their prefill in the same iteration. The KV cache is paged: a fixed pool of
NUM_BLOCKS blocks of BLOCK_SIZE tokens. Prompt lengths are known on arrival, output lengths
are not: a request ends when it emits its end token, which only the simulator knows. When a
running request needs a new block and none is free, the engine preempts the request admitted
most recently: its blocks are freed, the tokens it generated are lost, and it waits again, to be
prefilled anew (recompute preemption; vLLM's keeps the generated tokens and recomputes their
keys and values with the prompt's).

The policy is graded by simulation against the engine's measured cost model, on traces drawn
from the grading run's secret seed. Each request has a deadline: FIRST_TOKEN_S plus
PER_TOKEN_S for each token of its answer. Correctness: every request served, the engine's
limits respected, and at a light load 99% of requests on time. Speed: the highest arrival rate
at which 99% of requests stay on time (the policy's capacity), over the reference policy's on
the same traces. The record of a run holds only the policy's decisions (which requests were
admitted at which iteration); the parent replays them through the engine itself, so every
limit is checked again and every latency is computed by the parent.
"""
from __future__ import annotations

import bisect
import math

import numpy as np

from course.llm import LLAMA2_7B
from course.paging import blocks_for

from .. import capacity as cap_search
from ..spec import Assessment, Exercise, Lab, Speed

# The engine's cost model. An iteration with `running` requests decoding and newcomers
# prefilled (padded to the longest newcomer: one rectangular forward pass) takes
#   T0_S + T_DECODE_S * running  +  (T_PREFILL0_S + T_PREFILL_S * padded tokens, if any newcomer)
# seconds: one forward pass for the decode step, one for the prefill. The notebook's Step 1
# measures them for ENGINE_MODEL on the H200, prints the fit in the form below and fails if its
# full decode step (MAX_RUNNING requests) or full prefill (MAX_PREFILL_TOKENS) is more than 30%
# off this model's (stale): then paste its printout here. Three H200 fits gave t0 = 7.14, 7.17
# and 7.92 ms, t_decode = 16.8, 29.5 and 10.7 us, t_prefill0 = 5.78, 6.42 and 7.35 ms,
# t_prefill = 4.87, 4.69 and 4.32 us; the constants are the means of the first two, and all
# three fits put the full decode step and the full prefill within 5% of them. The fixed costs are mostly the host's
# kernel launches; the cost per decoding request is small and the least steady, because 8
# layers of weights are read once per iteration whatever the batch.
T0_S = 7.16e-3
T_DECODE_S = 23e-6
T_PREFILL0_S = 6.1e-3
T_PREFILL_S = 4.78e-6
# The model the constants were measured on: the Llama 2 7B layer, 8 layers deep, bf16, with
# course.llm's KVCache (its decode step gathers each row's keys and values up to the longest).
ENGINE_MODEL = LLAMA2_7B.scaled(n_layers=8)
BLOCK_SIZE = 16  # tokens per block of the KV cache
NUM_BLOCKS = 512  # the pool: 8,192 tokens of keys and values
MAX_RUNNING = 64  # requests in the running batch (the KV cache's slots)
MAX_PREFILL_TOKENS = 2048  # padded prefill tokens per iteration: activation memory is sized for this
# The workload: prompts of 16 to 512 tokens, uniform; answers of 1 to MAX_OUTPUT tokens, most
# short, a few long (geometric, mean about MEAN_OUTPUT).
PROMPT = (16, 256)
SHORT_MEAN, LONG_OUTPUT, LONG_SHARE = 32, (256, 1024), 0.3
MEAN_OUTPUT = (1 - LONG_SHARE) * SHORT_MEAN + LONG_SHARE * sum(LONG_OUTPUT) / 2
MAX_OUTPUT = LONG_OUTPUT[1]
# The service-level objective: a request answered within FIRST_TOKEN_S + PER_TOKEN_S x (its
# answer's tokens) of its arrival is on time. PER_TOKEN_S is 1.5x an iteration of a full batch
# (MAX_RUNNING decoding); FIRST_TOKEN_S is 20 such iterations.
_FULL_ITERATION_S = T0_S + T_DECODE_S * MAX_RUNNING
PER_TOKEN_S = round(1.5 * _FULL_ITERATION_S, 4)
FIRST_TOKEN_S = round(20 * _FULL_ITERATION_S, 3)
ON_TIME = 0.99  # the share of requests that must be on time
KEEP_ON_PREEMPT = False  # preemption loses the generated tokens (see _preempt)
TICK_S = 1e-3  # while requests wait and nothing runs, the policy is asked this often
N_REQUESTS = 500  # per trace
RATE_STEP = 1.06  # the ladder of arrival rates: each 6% above the last
GIVE_UP_S = 10.0  # simulated time after the last arrival before unserved requests count as lost
STOP_LATE = 0.05  # a run stops once this share of requests is known to be late


def iteration_seconds(running: int, newcomer_prompts=()) -> float:
    """How long one iteration takes (the cost model): ``running`` requests decode one token
    each, and the newcomers' prompts, padded to the longest, are prefilled."""
    t = T0_S + T_DECODE_S * running
    if len(newcomer_prompts):
        t += T_PREFILL0_S + T_PREFILL_S * len(newcomer_prompts) * max(newcomer_prompts)
    return t


def deadline(output_tokens) -> float:
    """Seconds after its arrival by which a request with this many answer tokens is on time."""
    return FIRST_TOKEN_S + PER_TOKEN_S * np.asarray(output_tokens, dtype=np.float64)


# --------------------------------------------------------------------------- the engine
def _engine(decide, arrivals, prompts, outputs, *, stop_late: float = STOP_LATE, log: list | None = None) -> dict:
    """Run the engine on one trace. ``decide(it, queue, prefill, running, gen, free, now)`` returns
    the request numbers to admit at iteration ``it`` (a subset of ``queue``). Returns the
    record (admissions), and per request: finish time, first-token time, preemptions. With a
    ``log`` list, appends one (start, end, running, newcomers, blocks in use) per iteration.

    Both the grader's run of a policy and the parent's replay of a record go through here, so
    a record that breaks a limit fails the same way a policy does."""
    arr = [float(a) for a in arrivals]
    out = [int(o) for o in outputs]
    n = len(arr)
    prefill = [int(p) for p in prompts]  # tokens the next prefill processes (grows on preemption)
    base = [0] * n  # answer tokens kept from before the last preemption (KEEP_ON_PREEMPT only)
    gen = [0] * n  # answer tokens generated since the last admission
    held = [0] * n  # blocks held
    finish = [math.inf] * n
    first = [math.inf] * n
    preempted = [0] * n
    due = [a + float(d) for a, d in zip(arr, deadline(out))]
    queue: list[int] = []  # waiting request numbers, in arrival order
    running: list[int] = []  # in admission order
    free = NUM_BLOCKS
    rec_it, rec_size, rec_ids = [], [], []
    now, i, it, late_done = 0.0, 0, 0, 0
    give_up = arr[-1] + GIVE_UP_S if n else 0.0
    over = int(stop_late * n) + 1
    stopped = math.nan
    while i < n or queue or running:
        it += 1
        if not queue and not running:
            now = max(now, arr[i])
        while i < n and arr[i] <= now:
            queue.append(i)  # every preempted request arrived earlier: the order holds
            i += 1
        if it % 16 == 0:  # decided yet? more than stop_late of all requests are known late
            late = late_done + sum(now > due[j] for j in queue) + sum(now > due[j] for j in running)
            if late >= over:
                stopped = now
                break
        # Every running request needs room for the token it decodes now. Oldest first; when no
        # block is free, the request admitted last is preempted (recompute).
        k = 0
        while k < len(running):
            r = running[k]
            need = -(-(prefill[r] + gen[r] + 1) // BLOCK_SIZE) - held[r]  # blocks_for, inlined: the hot loop
            while need > free and running[-1] != r:
                free += _preempt(running.pop(), prefill, base, gen, held, preempted, queue)
            if need > free:  # r is the newest itself: it goes back to waiting
                free += _preempt(running.pop(), prefill, base, gen, held, preempted, queue)
                break
            held[r] += need
            free -= need
            k += 1
        decoding = len(running)
        new: list[int] = []
        if queue and decoding < MAX_RUNNING and \
                min(blocks_for(prefill[j] + 1, BLOCK_SIZE) for j in queue) <= free:
            new = decide(it, queue, prefill, running, gen, free, now)
            if new:
                if len(new) != len(set(new)) or any(j not in queue for j in new):
                    raise ValueError("admitted a request that is not waiting")
                if decoding + len(new) > MAX_RUNNING:
                    raise ValueError(f"admitting {len(new)} with {decoding} running makes {decoding + len(new)}: "
                                     f"the engine runs at most MAX_RUNNING = {MAX_RUNNING}")
                need = sum(blocks_for(prefill[j] + 1, BLOCK_SIZE) for j in new)
                if need > free:
                    raise ValueError(f"admitting these needs {need} blocks (prompt plus first token each), "
                                     f"but only {free} are free")
                padded = len(new) * max(prefill[j] for j in new)
                if padded > MAX_PREFILL_TOKENS:
                    raise ValueError(f"{len(new)} prompts padded to the longest are {padded} tokens: the engine "
                                     f"prefills at most MAX_PREFILL_TOKENS = {MAX_PREFILL_TOKENS} per iteration")
                rec_it.append(it)
                rec_size.append(len(new))
                rec_ids += new
                for j in new:
                    queue.remove(j)
                    held[j] = blocks_for(prefill[j] + 1, BLOCK_SIZE)
                    free -= held[j]
                    gen[j] = 0
                    running.append(j)
        if not running:  # idle: wait for the next arrival, asking the policy every TICK_S
            nxt = arr[i] if i < n else math.inf
            now = min(nxt, now + TICK_S) if queue else nxt
            if now > give_up:
                break
            continue
        start = now
        now += iteration_seconds(decoding, [prefill[j] for j in new])
        if log is not None:
            log.append((start, now, tuple(running), tuple(new), NUM_BLOCKS - free))
        keep = []
        for r in running:
            gen[r] += 1
            if first[r] == math.inf:
                first[r] = now
            if base[r] + gen[r] >= out[r]:  # its end token: done, its blocks free at once
                finish[r] = now
                free += held[r]
                held[r] = 0
                late_done += now > due[r]
            else:
                keep.append(r)
        running = keep
    return {"record": {"it": np.array(rec_it, dtype=np.int64), "size": np.array(rec_size, dtype=np.int64),
                       "admitted": np.array(rec_ids, dtype=np.int64)},
            "finish": np.array(finish), "first": np.array(first), "preempted": np.array(preempted),
            "stop": stopped}


def _preempt(r, prefill, base, gen, held, preempted, queue) -> int:
    """Free r's blocks; it waits again, in arrival order, and starts over: the tokens it generated
    are lost. (With KEEP_ON_PREEMPT, as in vLLM, they are kept and join its prompt, so the next
    prefill recomputes the keys and values of both.)"""
    freed = held[r]
    held[r] = 0
    if KEEP_ON_PREEMPT:
        prefill[r] += gen[r]
        base[r] += gen[r]
    gen[r] = 0
    preempted[r] += 1
    bisect.insort(queue, r)
    return freed


def run_trace(policy, arrivals, prompts, outputs, log: list | None = None, stop_late: float = STOP_LATE) -> dict:
    """Run ``policy`` on one trace. The policy is called as
    ``policy(waiting, running, free_blocks, now)``: ``waiting`` a tuple of (arrival time,
    prompt length) pairs, oldest first; ``running`` a tuple of (prompt length, tokens generated)
    pairs, in admission order; ``free_blocks`` the free blocks of the KV cache; ``now`` the time.
    It returns positions in ``waiting`` to admit. Returns the engine's result (see _engine);
    ``log``, if given, collects one entry per iteration (see _engine); ``stop_late=1`` never stops
    early."""
    arr = [float(a) for a in arrivals]

    def decide(it, queue, prefill, running, gen, free, now):
        waiting = tuple((arr[j], prefill[j]) for j in queue)
        busy = tuple((prefill[r], gen[r]) for r in running)
        return [queue[k] for k in _picked(policy(waiting, busy, free, now), len(queue))]

    return _engine(decide, arrivals, prompts, outputs, log=log, stop_late=stop_late)


def _picked(answer, n_waiting: int) -> list[int]:
    """The positions in ``waiting`` a policy's answer names, oldest first."""
    if isinstance(answer, (int, np.integer)) and not isinstance(answer, bool):
        answer = range(int(answer))  # "the k oldest"
    try:
        picked = sorted({int(k) for k in answer})
    except (TypeError, ValueError):
        raise TypeError(f"schedule must return positions in `waiting` (a list of ints), not {answer!r}"[:300]) from None
    if picked and (picked[0] < 0 or picked[-1] >= n_waiting):
        raise IndexError(f"schedule returned position {picked[0] if picked[0] < 0 else picked[-1]}, "
                         f"but only {n_waiting} requests wait (positions 0 to {n_waiting - 1})")
    return picked


def replay(arrivals, prompts, outputs, record) -> tuple[dict | None, str]:
    """Re-run the engine with the admissions of a record. Returns (the engine's result,
    problem); problem is "" when the record is one the engine could have produced."""
    try:
        its = [int(x) for x in np.asarray(record.get("it", ()), dtype=np.int64)]
        sizes = np.asarray(record.get("size", ()), dtype=np.int64)
        ids = np.asarray(record.get("admitted", ()), dtype=np.int64)
    except (TypeError, ValueError):
        return None, "malformed record"
    if len(its) != sizes.size or int(sizes.sum()) != ids.size or (sizes.size and sizes.min() < 1):
        return None, "malformed record"
    plan = dict(zip(its, (g.tolist() for g in np.split(ids, np.cumsum(sizes)[:-1])))) if its else {}
    if len(plan) != len(its):
        return None, "malformed record"
    used = set()

    def decide(it, queue, prefill, running, gen, free, now):
        used.add(it)
        return plan.get(it, [])

    try:
        result = _engine(decide, arrivals, prompts, outputs)
    except ValueError as exc:
        return None, f"the record breaks the engine's rules: {exc}"
    if not used.issuperset(plan):
        return None, "the record admits requests at an iteration where the engine did not ask"
    return result, ""


# --------------------------------------------------------------------------- the reference
WATERMARK = NUM_BLOCKS // 10  # blocks the reference keeps free for the running requests to grow


def reference_schedule(waiting, running, free_blocks, now) -> list[int]:
    """First come, first served: admit the oldest waiting requests while the free blocks
    cover their prompts and still leave WATERMARK blocks for the running requests to grow."""
    picked, budget, longest = [], free_blocks - WATERMARK, 0
    for k, (_, length) in enumerate(waiting):
        need = blocks_for(length + 1, BLOCK_SIZE)
        longest = max(longest, length)
        if (need > budget or len(running) + len(picked) >= MAX_RUNNING
                or (len(picked) + 1) * longest > MAX_PREFILL_TOKENS):
            break
        picked.append(k)
        budget -= need
    return picked


# --------------------------------------------------------------------------- traces
def _inputs(p, rng) -> dict:
    """One base trace: arrivals at one request per second, prompt and answer lengths. Every
    rate of the ladder plays the same trace, sped up, so lateness changes smoothly with rate."""
    n = p["n"]
    prompts = rng.integers(PROMPT[0], PROMPT[1] + 1, n)
    long = rng.random(n) < LONG_SHARE
    outputs = np.where(long, rng.integers(LONG_OUTPUT[0], LONG_OUTPUT[1] + 1, n), np.minimum(rng.geometric(1.0 / SHORT_MEAN, n), LONG_OUTPUT[0]))
    return {"arrivals": np.cumsum(rng.exponential(1.0, n)), "prompts": prompts.astype(np.int64),
            "outputs": outputs.astype(np.int64)}


def trace(rate: float, n: int = N_REQUESTS, rng: np.random.Generator | None = None) -> dict:
    """Poisson arrivals at ``rate`` requests per second, with prompt and answer lengths drawn
    as the grader draws them: {"arrivals": seconds, "prompts": tokens, "outputs": tokens}."""
    base = _inputs({"n": n}, rng if rng is not None else np.random.default_rng())
    return {**base, "arrivals": base["arrivals"] / rate}


def _cases(simulator: bool) -> list[dict]:
    # Three independent base traces; two in simulator mode, where every decision is a round trip to
    # the learner's runner on a CPU shared with everything else (the same policy, two thirds the time).
    return [{"trace": k, "n": N_REQUESTS} for k in range(2 if simulator else 3)]


def _ideal_rate() -> float:
    """Requests per second if the cache were always full of mean-sized requests decoding at
    MAX_RUNNING: an upper bound no policy reaches, used to place the ladder of rates."""
    per_request = (MEAN_OUTPUT * (T0_S / MAX_RUNNING + T_DECODE_S)
                   + T_PREFILL_S * PROMPT[1])
    return 1.0 / per_request


def ladder() -> np.ndarray:
    """The arrival rates a policy is tried at, lowest first, each RATE_STEP above the last."""
    return cap_search.ladder(0.03 * _ideal_rate(), _ideal_rate(), RATE_STEP)


def late_share(arrivals, outputs, result) -> float:
    """The share of requests not answered by their deadline (never answered counts as late)."""
    if result is None:
        return math.inf
    if not math.isnan(result["stop"]):
        return 1.0  # stopped once STOP_LATE were known late: far over 1 - ON_TIME
    lat = result["finish"] - np.asarray(arrivals, dtype=np.float64)
    return float(np.mean(~(lat <= deadline(outputs))))


# --------------------------------------------------------------------------- grading
def simulate(policy, params, inputs) -> dict[str, np.ndarray]:
    """The grader's run of one case: the base trace at rates of the ladder, the lightest rate
    first, then a bisection for the last rate with at least ON_TIME of requests on time. The
    records of the rates tried are concatenated; ``rung`` says which rate each admission
    belongs to, ``tried`` lists the rates tried in order."""
    rates = ladder()
    records, tried = [], []

    def within(rung: int) -> bool:
        arrivals = inputs["arrivals"] / rates[rung]
        result = run_trace(policy, arrivals, inputs["prompts"], inputs["outputs"])
        rec = result["record"]
        rec["rung"] = np.full(rec["size"].shape, rung, dtype=np.int64)
        records.append(rec)
        tried.append(rung)
        return late_share(arrivals, inputs["outputs"], result) <= 1 - ON_TIME

    cap_search.search(len(rates), within)
    out = {k: np.concatenate([r[k] for r in records]) for k in ("it", "size", "admitted", "rung")}
    out["tried"] = np.array(tried, dtype=np.int64)
    return out


def _split(record: dict) -> dict[int, dict]:
    """The concatenated record of a case, cut back into one record per rung tried."""
    rung = np.asarray(record.get("rung", ()), dtype=np.int64)
    size = np.asarray(record.get("size", ()), dtype=np.int64)
    its = np.asarray(record.get("it", ()), dtype=np.int64)
    ids = np.asarray(record.get("admitted", ()), dtype=np.int64)
    if not (rung.shape == size.shape == its.shape) or int(size.sum()) != ids.size:
        raise ValueError("malformed record")
    groups = np.split(ids, np.cumsum(size)[:-1]) if size.size else []
    out = {}
    for k in np.asarray(record.get("tried", ()), dtype=np.int64):
        mine = np.flatnonzero(rung == k)
        out[int(k)] = {"it": its[mine], "size": size[mine],
                       "admitted": np.concatenate([groups[j] for j in mine]) if mine.size else np.array([], np.int64)}
    return out


def _capacity_of_case(inputs, record) -> tuple[float, float, int, str]:
    """Capacity on one base trace: the rate where the late share crosses 1 - ON_TIME,
    interpolated between the highest rung tried within it and the rung above it. Also the late
    share at the lightest rate, the preemptions at the capacity's rung, and a problem."""
    rates = ladder()
    try:
        per_rung = _split(record)
    except ValueError as exc:
        return 0.0, math.inf, 0, str(exc)
    shares, preemptions = {}, {}
    for k, rec in sorted(per_rung.items()):
        arrivals = inputs["arrivals"] / rates[k]
        result, problem = replay(arrivals, inputs["prompts"], inputs["outputs"], rec)
        if not problem and math.isnan(result["stop"]) and np.isinf(result["finish"]).any():
            problem = (f"{int(np.isinf(result['finish']).sum())} requests never served at {rates[k]:.1f} "
                       f"requests/s (your policy kept them waiting {GIVE_UP_S:g} s after the last arrival)")
        if problem:
            return 0.0, math.inf, 0, problem
        shares[k] = late_share(arrivals, inputs["outputs"], result)
        preemptions[k] = int(result["preempted"].sum())
    lightest = shares.get(0, math.inf)
    if not lightest <= 1 - ON_TIME:
        return 0.0, lightest, preemptions.get(0, 0), ""
    k = max(j for j, v in shares.items() if v <= 1 - ON_TIME)
    # A share of 1.0 marks a run stopped early (late_share): no point to interpolate towards.
    return cap_search.crossing(rates, RATE_STEP, shares, 1 - ON_TIME, ceiling=1.0), lightest, preemptions[k], ""


def capacity(cases, records):
    """The geometric mean of the cases' capacities; each case's (capacity, late share at the
    lightest rate, preemptions at its capacity, problem)."""
    per_case = [_capacity_of_case(inputs, record) for (_, inputs), record in zip(cases, records)]
    caps = [c[0] for c in per_case]
    return cap_search.geometric_mean(caps), per_case


def _reference_capacity(cases):
    return capacity(cases, [simulate(reference_schedule, p, i) for p, i in cases])


def assess(cases, records) -> Assessment:
    cap, per_case = capacity(cases, records)
    ref, ref_cases = cap_search.of_reference(cases, _reference_capacity)
    lines = []
    for (params, _), (c, light, pre, problem), ref_case in zip(cases, per_case, ref_cases):
        where = f"trace {params['trace']}"
        if problem:
            lines.append(f"FAIL {where}: {problem}")
        elif not light <= 1 - ON_TIME:
            share = f"over {STOP_LATE:.0%}" if light >= 1 else f"{light:.1%}"
            lines.append(f"FAIL {where}: at the lightest rate, {ladder()[0]:.1f} requests/s, {share} of the "
                         f"requests are late (at most {1 - ON_TIME:.0%} may be)")
        else:
            lines.append(f"pass {where}: {ON_TIME:.0%} on time up to {c:.1f} requests/s, {pre} preemptions "
                         f"there (reference policy: {ref_case[0]:.1f} requests/s, {ref_case[2]} preemptions)")
    ratio = cap / ref if ref else None
    return cap_search.verdict(
        cases, lines,
        f"every request served; {ON_TIME:.0%} on time up to {cap:.1f} requests/s (geometric mean of "
        f"{len(cases)} traces)",
        ratio, f"capacity {cap:.1f} requests/s with {ON_TIME:.0%} on time; the reference policy's "
               f"{ref:.1f} requests/s: {ratio or 0:.2f}x")


NOT_THE_REFERENCE = ("*.reference_schedule", "reference_schedule")

LAB = Lab(
    name="inflight_batching",
    title="Lab 17: inflight_batching",
    setup="import math\nimport numpy as np\n",
    # What answers may use as engine.NAME in the sandbox (the notebook imports this module).
    engine=("T0_S", "T_DECODE_S", "T_PREFILL0_S", "T_PREFILL_S", "BLOCK_SIZE", "NUM_BLOCKS", "MAX_RUNNING",
            "MAX_PREFILL_TOKENS", "PROMPT", "MAX_OUTPUT", "MEAN_OUTPUT", "PER_TOKEN_S", "FIRST_TOKEN_S", "ON_TIME", "TICK_S",
            "N_REQUESTS", "blocks_for", "iteration_seconds"),
    exercises=(
        Exercise(
            name="schedule",
            title="An in-flight batching admission policy: capacity with 99% of requests on time",
            backend="numba",  # unused: nothing runs on a device
            args=("waiting", "running", "free_blocks", "now"),
            inputs=_inputs,
            outputs={},
            reference=lambda **_: {},
            cases=_cases,
            points=2,
            speed=Speed(3, full_at=0.95, zero_at=0.5),
            forbidden=NOT_THE_REFERENCE,
            simulate=simulate,
            assess=assess,
        ),
    ),
)
