# Honest: the last-block sum with the work split between two threads of each block. Thread 0 writes the
# block's partial sum; a barrier; thread 1 fences and takes the ticket (its fence, past the barrier,
# publishes thread 0's write). In the block that draws the last ticket, a barrier passes the news to
# thread 0, which fences and reads every partial.
import numpy as np
from numba import cuda, int32

THREADS = 64


@cuda.jit
def _sum(x, part, ticket, out):
    b = cuda.blockIdx.x
    t = cuda.threadIdx.x
    last = cuda.shared.array(1, int32)
    if t == 0:
        s = 0.0
        for i in range(b * THREADS, min((b + 1) * THREADS, x.size)):
            s += x[i]
        part[b] = s
    cuda.syncthreads()
    if t == 1:
        cuda.threadfence()
        last[0] = 1 if cuda.atomic.add(ticket, 0, 1) == cuda.gridDim.x - 1 else 0
    cuda.syncthreads()
    if last[0] == 1 and t == 0:
        cuda.threadfence()
        total = 0.0
        for k in range(cuda.gridDim.x):
            total += part[k]
        out[0] = total


@cuda.jit
def _zero(ticket):
    if cuda.grid(1) == 0:
        ticket[0] = 0


def reduce_sum(x, out):
    blocks = (x.size + THREADS - 1) // THREADS
    part = cuda.device_array(blocks, dtype=np.float64)
    ticket = cuda.device_array(1, dtype=np.int32)
    _zero[1, 1](ticket)
    _sum[blocks, THREADS](x, part, ticket, out)
