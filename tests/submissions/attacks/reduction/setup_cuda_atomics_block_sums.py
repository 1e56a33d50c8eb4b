# ATTACK (forbidden construct past the static check): block_sums forbids atomics (numba.cuda.atomic.*).
# This file never imports cuda: the lab's setup already bound `cuda` (from numba import cuda), so the
# static check sees the name `cuda.atomic.add`, which no alias resolves to numba.cuda.atomic.add and the
# pattern does not match. Each block sums with one atomic per element instead of the tree the exercise asks.
BLOCK = 256


@cuda.jit  # noqa: F821 - cuda comes from the lab's setup
def _k(x, partials):
    b = cuda.blockIdx.x  # noqa: F821
    t = cuda.threadIdx.x  # noqa: F821
    if t == 0:
        partials[b] = 0.0
    cuda.syncthreads()  # noqa: F821
    i = b * BLOCK + t
    if i < x.shape[0]:
        cuda.atomic.add(partials, b, x[i])  # noqa: F821


def block_sums(x, partials):
    _k[partials.shape[0], BLOCK](x, partials)
