"""Data, tensor and pipeline parallelism: the pieces the chapter *Parallelism* runs (Part IV).

Three kinds of helpers live here:

* formulas and a simulator that run without torch: :func:`bubble_fraction`, :func:`schedule`
  (a pipeline schedule, event by event) and :func:`bucket_plan` (how DDP groups gradients);
* worker functions for :func:`course.dist.launch`, each called on every rank with a
  :class:`course.dist.Rank`: :func:`ddp_and_tp_check` (correctness, runs on CPU with gloo),
  :func:`ddp_timing` and :func:`tp_mlp_timing` (speed, for two GPUs with NCCL);
* a decoder split into pipeline stages: :func:`split_decoder`, run in one process by
  :func:`pipelined_forward`, or one stage per rank by :func:`send_recv_forward`, which the
  workers :func:`pipeline_check` (correctness, gloo or NCCL) and :func:`pipeline_timing`
  (speed, for two GPUs) call.
"""
from __future__ import annotations

import math
import os
import time
from typing import Sequence

# --------------------------------------------------------------------------- formulas


def bubble_fraction(p: int, m: int) -> float:
    """Idle share of a GPipe-style pipeline of ``p`` equal stages fed ``m`` micro-batches:
    each stage works m slots out of m + p - 1, so (p - 1) / (m + p - 1) of the time is idle."""
    return (p - 1) / (m + p - 1)


def _per_stage(value, p: int) -> list[float]:
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else [float(value)] * p


def stage_orders(kind: str, p: int, m: int) -> list[list[tuple[str, int]]]:
    """The order in which each stage runs its work: ("F", i) is the forward pass of
    micro-batch i, ("B", i) its backward pass.

    * ``"forward"``: forward passes only (inference);
    * ``"gpipe"``: all forward passes, then all backward passes (Huang et al., 2019);
    * ``"1f1b"``: stage s first runs p - 1 - s forward passes, then alternates one forward and
      one backward, then drains the remaining backward passes (PipeDream-Flush, the
      non-interleaved schedule of Megatron-LM; Narayanan et al., 2021).
    """
    orders = []
    for s in range(p):
        if kind == "forward":
            order = [("F", i) for i in range(m)]
        elif kind == "gpipe":
            order = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        elif kind == "1f1b":
            warm = min(p - 1 - s, m)
            order = [("F", i) for i in range(warm)]
            for i in range(m - warm):
                order += [("F", warm + i), ("B", i)]
            order += [("B", i) for i in range(m - warm, m)]
        else:
            raise ValueError(f"unknown schedule {kind!r}: use 'forward', 'gpipe' or '1f1b'")
        orders.append(order)
    return orders


def schedule(kind: str, p: int, m: int, t_f=1.0, t_b=2.0) -> dict:
    """Simulate a pipeline of ``p`` stages running ``m`` micro-batches in the order of
    :func:`stage_orders`. ``t_f`` and ``t_b`` are the times of one micro-batch's forward and
    backward pass on a stage (a number, or one per stage).

    A forward pass on stage s needs that micro-batch's forward on stage s - 1; a backward
    pass on stage s needs its backward on stage s + 1 (the last stage starts backward from its
    own forward). Each operation starts as soon as its stage is free and its input is there.

    Returns ``events`` (stage, "F" or "B", micro-batch, start, end), the ``makespan``, the
    ``bubble`` (idle share of all stage-time) and ``peak_in_flight``: for each stage, the most
    micro-batches whose forward has run and whose backward has not (activations kept alive).
    """
    tf, tb = _per_stage(t_f, p), _per_stage(t_b, p)
    orders = stage_orders(kind, p, m)
    end: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p
    nxt = [0] * p
    events = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            if nxt[s] == len(orders[s]):
                continue
            op, i = orders[s][nxt[s]]
            if op == "F":
                dep = ("F", s - 1, i) if s > 0 else None
            else:
                dep = ("B", s + 1, i) if s < p - 1 else ("F", s, i)
            if dep is not None and dep not in end:
                continue
            start = max(free[s], end[dep] if dep else 0.0)
            stop = start + (tf[s] if op == "F" else tb[s])
            end[(op, s, i)] = stop
            free[s] = stop
            events.append((s, op, i, start, stop))
            nxt[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("the schedule deadlocks")
    makespan = max(e[4] for e in events)
    busy = sum(e[4] - e[3] for e in events)
    peak = []
    for s in range(p):
        live = top = 0
        for op, _ in orders[s]:
            live += 1 if op == "F" else -1
            top = max(top, live)
        peak.append(top)
    return {"events": events, "makespan": makespan, "bubble": 1 - busy / (p * makespan),
            "peak_in_flight": peak}


def bucket_plan(param_bytes: Sequence[int], cap_mb: float = 25) -> list[list[int]]:
    """Group parameters into all-reduce buckets the way DDP's design note describes: in the
    reverse order of ``model.parameters()`` (roughly the order in which backward produces
    gradients), a bucket closing once it holds at least ``cap_mb`` MiB. Returns the parameter
    indices of each bucket, first bucket first. (DDP itself also re-orders the buckets after
    the first iteration to follow the order in which gradients actually arrived.)"""
    cap = cap_mb * (1 << 20)
    buckets, current, size = [], [], 0
    for i in reversed(range(len(param_bytes))):
        current.append(i)
        size += param_bytes[i]
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


# --------------------------------------------------------------------------- tensor parallel pieces


def _tp_functions():
    """Megatron's two conjugate operators, as autograd functions (Shoeybi et al., 2019, Sec. 3):
    ``f`` is the identity forward and an all-reduce backward; ``g`` an all-reduce forward and the
    identity backward. Each counts its all-reduces in ``counts``."""
    import torch
    import torch.distributed as dist

    counts = {"forward": 0, "backward": 0}

    class CopyToTP(torch.autograd.Function):  # f: enters the split region
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            grad = grad.clone()
            dist.all_reduce(grad)  # each rank holds part of dL/dx: add them
            counts["backward"] += 1
            return grad

    class ReduceFromTP(torch.autograd.Function):  # g: leaves the split region
        @staticmethod
        def forward(ctx, partial):
            out = partial.clone()
            dist.all_reduce(out)  # the partial sums of the row-split layer
            counts["forward"] += 1
            return out

        @staticmethod
        def backward(ctx, grad):
            return grad  # every rank already has the whole dL/dy

    return CopyToTP.apply, ReduceFromTP.apply, counts


def swiglu(x, gate, up, down):
    """The Llama feed-forward block: down(silu(gate x) * up x), weights as nn.Linear stores them
    (out_features, in_features)."""
    import torch.nn.functional as F

    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)


def tp_shards(gate, up, down, rank: int, world: int):
    """This rank's share of a SwiGLU MLP for Megatron's split: rows of ``gate`` and ``up``
    (column-parallel: a slice of the hidden features) and the matching columns of ``down``
    (row-parallel: it consumes only that slice and yields a partial sum)."""
    h = gate.shape[0] // world
    rows = slice(rank * h, (rank + 1) * h)
    return gate[rows].contiguous(), up[rows].contiguous(), down[:, rows].contiguous()


def tp_swiglu(x, gate_s, up_s, down_s, f, g):
    """The tensor-parallel MLP on one rank: one all-reduce forward (in g), one backward (in f)."""
    return g(swiglu(f(x), gate_s, up_s, down_s))


# --------------------------------------------------------------------------- workers: correctness


def _env() -> dict:
    keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
    return {k: os.environ.get(k) for k in keys}


def ddp_and_tp_check(rank, batch: int = 4, seq: int = 32, tokens: int = 6, d: int = 64,
                     d_ff: int = 176) -> dict:
    """Two checks in one launch, and what torchrun told this process.

    DDP: one training step of ``llm.TINY`` on this rank's half of a batch, wrapped in
    DistributedDataParallel, against the same step on the whole batch in this one process.
    TP: a SwiGLU MLP split over the ranks (Megatron's column/row split) in float64, forward and
    backward, against the unsplit MLP.
    """
    import torch
    import torch.nn.functional as F
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from course import llm

    dev = rank.device
    out = {"env": _env(), "backend": rank.backend, "device": str(dev)}

    # ---- data parallel
    cfg = llm.TINY
    gen = torch.Generator().manual_seed(1)
    tokens_all = torch.randint(0, cfg.vocab, (batch, seq + 1), generator=gen).to(dev)
    inputs, targets = tokens_all[:, :-1], tokens_all[:, 1:]

    def loss_of(model, x, y):
        logits = model(x)
        return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())

    # The reference: one process, the whole batch, plain SGD.
    ref = llm.build(cfg, seed=0, device=dev).train()
    loss_of(ref, inputs, targets).backward()
    ref_grads = [p.grad.detach().clone() for p in ref.parameters()]
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.1 * p.grad

    # DDP: every rank the same model, half the batch. DDP averages the gradients.
    local = llm.build(cfg, seed=0, device=dev).train()
    model = DDP(local, device_ids=[dev.index] if rank.on_gpu else None)
    half = batch // rank.world
    rows = slice(rank.rank * half, (rank.rank + 1) * half)
    loss = loss_of(model, inputs[rows], targets[rows])
    loss.backward()
    grad_diff = max(float((p.grad - r).abs().max()) for p, r in zip(local.parameters(), ref_grads))
    grad_scale = max(float(r.abs().max()) for r in ref_grads)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.step()
    param_diff = max(float((p - r).abs().max()) for p, r in zip(local.parameters(), ref.parameters()))
    # Do the ranks agree with each other after the step? Compare a checksum.
    checksum = torch.tensor([sum(float(p.double().sum()) for p in local.parameters())],
                            dtype=torch.float64, device=dev)
    sums = [torch.zeros_like(checksum) for _ in range(rank.world)]
    dist.all_gather(sums, checksum)
    out["ddp"] = {"rows": [rows.start, rows.stop], "local_loss": float(loss),
                  "max_grad_diff": grad_diff, "max_grad": grad_scale, "max_param_diff": param_diff,
                  "checksums": [float(s) for s in sums],
                  "param_bytes": [p.numel() * p.element_size() for p in local.parameters()]}

    # ---- tensor parallel (float64: the split changes only the order of additions)
    f, g, counts = _tp_functions()
    gen = torch.Generator().manual_seed(2)
    dt = torch.float64
    gate = torch.randn(d_ff, d, generator=gen, dtype=dt) / math.sqrt(d)
    up = torch.randn(d_ff, d, generator=gen, dtype=dt) / math.sqrt(d)
    down = torch.randn(d, d_ff, generator=gen, dtype=dt) / math.sqrt(d_ff)
    x = torch.randn(tokens, d, generator=gen, dtype=dt)
    dy = torch.randn(tokens, d, generator=gen, dtype=dt)  # the loss is sum(y * dy)
    gate, up, down, x, dy = (t.to(dev) for t in (gate, up, down, x, dy))

    w = [t.clone().requires_grad_() for t in (gate, up, down)]
    x_ref = x.clone().requires_grad_()
    y_ref = swiglu(x_ref, *w)
    (y_ref * dy).sum().backward()

    shards = [t.requires_grad_() for t in tp_shards(gate, up, down, rank.rank, rank.world)]
    x_tp = x.clone().requires_grad_()
    y_tp = tp_swiglu(x_tp, *shards, f, g)
    (y_tp * dy).sum().backward()
    ref_shards = tp_shards(w[0].grad, w[1].grad, w[2].grad, rank.rank, rank.world)
    out["tp"] = {
        "y_diff": float((y_tp - y_ref).abs().max()),
        "dx_diff": float((x_tp.grad - x_ref.grad).abs().max()),
        "dw_diff": max(float((s.grad - r).abs().max()) for s, r in zip(shards, ref_shards)),
        "y_max": float(y_ref.abs().max()),
        "shard_shapes": [list(s.shape) for s in shards],
        "all_reduces": dict(counts),
    }
    return out


# --------------------------------------------------------------------------- workers: speed (GPUs)


def ddp_timing(rank, n_layers: int = 4, batch: int = 4, seq: int = 1024, iters: int = 10,
               warmup: int = 3, shape: dict | None = None) -> dict:
    """Training-step times (forward, loss, backward) of a decoder with Llama-2-7B layers, in
    bfloat16, on each rank:

    * ``one_gpu``: the whole batch of 2 x ``batch`` rows, no communication (what one GPU does);
    * ``local_half``: this rank's ``batch`` rows, no communication (DDP's compute);
    * ``ddp``: the same under DDP with its default buckets (all-reduce overlapped with backward);
    * ``ddp_one_bucket``: DDP with one bucket as large as all gradients (no overlap possible);
    * ``allreduce``: the all-reduce of all gradient bytes alone.
    Every time is the slowest rank's (:func:`course.dist.time_per_call`). ``shape`` overrides
    fields of the config (a smaller model, to try the function on the CPU).
    """
    import gc

    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from course import llm
    from course.dist import time_per_call

    dev = rank.device
    cfg = llm.LLAMA2_7B.scaled(**{"n_layers": n_layers, **(shape or {})})
    gen = torch.Generator().manual_seed(rank.rank)
    data = torch.randint(0, cfg.vocab, (rank.world * batch, seq + 1), generator=gen).to(dev)

    def step_fn(model, rows):
        x, y = data[:rows, :-1], data[:rows, 1:]

        def step():
            model.zero_grad(set_to_none=True)
            logits = model(x)
            F.cross_entropy(logits.flatten(0, 1).float(), y.flatten()).backward()
        return step

    def timed(wrap, rows, **ddp_args):
        module = llm.build(cfg, seed=0, device=dev, dtype=torch.bfloat16).train()
        ids = [dev.index] if rank.on_gpu else None
        model = DDP(module, device_ids=ids, **ddp_args) if wrap else module
        t = time_per_call(rank, step_fn(model, rows), iters=iters, warmup=warmup)
        grad_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
        del model, module
        gc.collect()
        if rank.on_gpu:
            torch.cuda.empty_cache()
        return t, grad_bytes

    out = {"params": llm.param_count(cfg), "tokens_per_rank": batch * seq, "layers": n_layers}
    out["one_gpu"], grad_bytes = timed(False, rank.world * batch)
    out["local_half"], _ = timed(False, batch)
    out["ddp"], _ = timed(True, batch)
    out["ddp_one_bucket"], _ = timed(True, batch, bucket_cap_mb=grad_bytes / (1 << 20) + 1)
    out["grad_bytes"] = grad_bytes

    import torch.distributed as dist

    flat = torch.ones(grad_bytes // 2, dtype=torch.bfloat16, device=dev)
    out["allreduce"] = time_per_call(rank, lambda: dist.all_reduce(flat), iters=iters, warmup=warmup)
    return out


def tp_mlp_timing(rank, token_counts: Sequence[int] = (16, 4096), iters: int = 50,
                  warmup: int = 10) -> dict:
    """The feed-forward block of Llama 2 70B (d_model 8192, d_ff 28672) in bfloat16, whole on one
    GPU and split over the ranks (tensor parallel), for each number of tokens in the batch.
    Returns per case the times of the whole MLP, of this rank's shard alone, of the shard with
    its all-reduce, and of the all-reduce alone, plus the weight bytes per GPU."""
    import torch
    import torch.distributed as dist

    from course import llm
    from course.dist import time_per_call

    # 70B, not 7B: a 7B block's decode products take less GPU time than Python takes to
    # launch them, and the host would set the pace.
    dev, cfg = rank.device, llm.LLAMA2_70B
    gen = torch.Generator(device=dev).manual_seed(0)  # the same weights on every rank

    def rand(*shape, fan_in):
        return (torch.randn(*shape, generator=gen, device=dev) / math.sqrt(fan_in)).to(torch.bfloat16)

    gate = rand(cfg.d_ff, cfg.d_model, fan_in=cfg.d_model)
    up = rand(cfg.d_ff, cfg.d_model, fan_in=cfg.d_model)
    down = rand(cfg.d_model, cfg.d_ff, fan_in=cfg.d_ff)
    shards = tp_shards(gate, up, down, rank.rank, rank.world)
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    out = {"world": rank.world, "weight_bytes_full": nbytes((gate, up, down)),
           "weight_bytes_shard": nbytes(shards), "cases": []}
    with torch.no_grad():
        for n in token_counts:
            x = rand(n, cfg.d_model, fan_in=1)

            def split():
                y = swiglu(x, *shards)
                dist.all_reduce(y)
                return y

            y_full, y_split = swiglu(x, gate, up, down), split()
            err = float((y_split.float() - y_full.float()).abs().max() / y_full.float().abs().max())
            partial = swiglu(x, *shards)
            case = {"tokens": n, "rel_err": err,
                    "full": time_per_call(rank, lambda: swiglu(x, gate, up, down), iters, warmup),
                    "shard": time_per_call(rank, lambda: swiglu(x, *shards), iters, warmup),
                    "tp": time_per_call(rank, split, iters, warmup),
                    "allreduce": time_per_call(rank, lambda: dist.all_reduce(partial), iters, warmup),
                    "allreduce_bytes": partial.numel() * partial.element_size()}
            out["cases"].append(case)
    return out


# --------------------------------------------------------------------------- pipeline stages


class Stage:
    """A run of consecutive decoder layers on one device; the first stage also embeds the
    tokens, the last also applies the final norm and the output head."""

    def __init__(self, model, first: int, last: int, device, *, embed: bool, head: bool) -> None:
        self.device = device
        self.layers = [model.layers[i].to(device) for i in range(first, last)]
        self.embed = model.embed.to(device) if embed else None
        self.norm = model.norm.to(device) if head else None
        self.head = model.head.to(device) if head else None
        self.inv_freq = model.inv_freq.to(device)
        self.dtype = model.embed.weight.dtype

    def __call__(self, x, seq: int):
        import torch

        # Rotary tables for positions 0..seq-1, computed as Decoder.forward does.
        positions = torch.arange(seq, device=self.device).expand(x.shape[0], seq)
        angles = positions[..., None].float() * self.inv_freq
        cos = angles.cos()[:, None].to(self.dtype)
        sin = angles.sin()[:, None].to(self.dtype)
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers:
            x = layer(x, cos, sin)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def split_decoder(model, devices: Sequence) -> list[Stage]:
    """Split a :class:`course.llm.Decoder` into ``len(devices)`` stages of (nearly) equal
    numbers of layers, moving each stage's weights to its device (in place)."""
    n, p = len(model.layers), len(devices)
    bounds = [round(k * n / p) for k in range(p + 1)]
    return [Stage(model, bounds[k], bounds[k + 1], devices[k], embed=k == 0, head=k == p - 1)
            for k in range(p)]


def pipelined_forward(stages: Sequence[Stage], tokens, micro_batches: int):
    """Forward ``tokens`` (batch, seq) through the stages in ``micro_batches`` slices of rows.

    The host queues micro-batch i on stage k + 1 right after queueing it on stage k, from one
    thread; activations move between devices with ``Tensor.to``. This shows the split is exact;
    :func:`send_recv_forward` is the pipeline of one process per stage. Returns the logits, on
    the last stage's device."""
    import torch

    seq = tokens.shape[1]
    outs = []
    for chunk in tokens.chunk(micro_batches, dim=0):
        x = chunk.to(stages[0].device, non_blocking=True)
        for stage in stages:
            x = stage(x.to(stage.device, non_blocking=True), seq)
        outs.append(x)
    return torch.cat(outs)


def send_recv_forward(rank, stage: Stage, tokens, micro_batches: int, width: int, dtype):
    """One stage per rank: forward ``tokens`` (batch, seq) in ``micro_batches`` slices of rows.

    Rank 0 embeds and runs its layers; rank k > 0 receives each slice's activations (rows, seq,
    ``width``) from rank k - 1, runs its layers and, unless it is the last, sends the result on.
    Every rank queues its work for slice i + 1 without waiting for its neighbours, so the
    stages overlap. Returns the logits on the last rank, None on the others."""
    import torch
    import torch.distributed as dist

    batch, seq = tokens.shape
    last = rank.world - 1
    outs, sends = [], []
    for chunk in tokens.chunk(micro_batches, dim=0):
        if rank.rank == 0:
            x = chunk
        else:
            x = torch.empty(chunk.shape[0], seq, width, device=rank.device, dtype=dtype)
            dist.recv(x, rank.rank - 1)
        x = stage(x, seq)
        if rank.rank < last:
            sends.append(dist.isend(x.contiguous(), rank.rank + 1))
        else:
            outs.append(x)
    for s in sends:
        s.wait()
    return torch.cat(outs) if rank.rank == last else None


def pipeline_check(rank, micro_batches: Sequence[int] = (1, 2, 4), batch: int = 8, seq: int = 32) -> dict:
    """``llm.TINY`` split over the ranks, one stage each, run by :func:`send_recv_forward`:
    the last rank compares the logits with the whole model's, for each number of micro-batches.
    Every rank builds the same model from the same seed; each keeps only its own stage."""
    import torch

    from course import llm

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products, so the split is exact to rounding
    model = llm.build(llm.TINY, seed=0, device=rank.device)
    tokens = torch.randint(0, llm.TINY.vocab, (batch, seq), generator=torch.Generator().manual_seed(3)).to(rank.device)
    with torch.no_grad():
        whole = model(tokens)
        stage = split_decoder(model, [rank.device] * rank.world)[rank.rank]
        out = {"layers": len(stage.layers), "max_diff": {}}
        for m in micro_batches:
            logits = send_recv_forward(rank, stage, tokens, m, llm.TINY.d_model, torch.float32)
            if logits is not None:
                out["max_diff"][m] = float((logits - whole).abs().max())
    return out


def pipeline_timing(rank, n_layers: int = 16, batch: int = 32, seq: int = 256,
                    micro_batches: Sequence[int] = (1, 2, 4, 8, 16, 32), iters: int = 5, warmup: int = 2,
                    shape: dict | None = None) -> dict:
    """Forward (prefill) times of a pipeline of Llama-2-7B layers in bfloat16, one stage of
    ``n_layers / world`` layers per rank, over a batch of ``batch`` x ``seq`` tokens, for each
    number of micro-batches:

    * ``pipeline``: the whole batch through :func:`send_recv_forward`;
    * ``stage``: one slice of ``batch / m`` rows through this rank's stage alone, no
      communication (the slowest rank's), the ``t`` of the bubble formula;
    * ``queue``: the host's time to queue that slice's kernels, the GPU idle (the median call):
      the floor under ``stage`` however small the slice.

    Each rank builds only its own stage (its own random weights: the times do not depend on
    them). Every time is the slowest rank's (:func:`course.dist.time_per_call`). ``shape``
    overrides fields of the config (a smaller model, to try the function on the CPU).
    """
    import torch
    import torch.distributed as dist

    from course import llm
    from course.dist import slowest, time_per_call

    dev, p = rank.device, rank.world
    dtype = torch.bfloat16 if rank.on_gpu else torch.float32
    cfg = llm.LLAMA2_7B.scaled(**{"n_layers": n_layers // p, **(shape or {})})
    model = llm.build(cfg, seed=rank.rank, device=dev, dtype=dtype)
    stage = Stage(model, 0, cfg.n_layers, dev, embed=rank.rank == 0, head=rank.rank == p - 1)
    tokens = torch.randint(0, cfg.vocab, (batch, seq), generator=torch.Generator().manual_seed(0)).to(dev)
    out = {"layers_per_stage": cfg.n_layers, "batch": batch, "seq": seq, "stages": p, "cases": []}
    with torch.inference_mode():
        for m in micro_batches:
            rows = batch // m
            x = tokens[:rows] if rank.rank == 0 else torch.randn(rows, seq, cfg.d_model, device=dev, dtype=dtype)

            def one_batch():
                send_recv_forward(rank, stage, tokens, m, cfg.d_model, dtype)
                # Batches must not overlap: rank 0 starting the next batch while the last rank
                # finishes this one would hide the bubble the timing is meant to show.
                rank.sync()
                dist.barrier()
            queue = []  # host seconds to queue one slice's kernels on this stage, the GPU idle
            for _ in range(iters):
                rank.sync()
                start = time.perf_counter()
                stage(x, seq)
                queue.append(time.perf_counter() - start)
            out["cases"].append({"micro_batches": m, "stage": time_per_call(rank, lambda: stage(x, seq), iters, warmup),
                                 "queue": slowest(rank, sorted(queue)[len(queue) // 2]),
                                 "pipeline": time_per_call(rank, one_batch, iters, warmup)})
    return out
