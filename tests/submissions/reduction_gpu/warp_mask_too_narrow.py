# The last warp reduced with warp barriers, but the mask names lanes 0-15 while all 32 lanes of
# the warp call cuda.syncwarp: undefined on a GPU, and what compute-sanitizer's synccheck reports.
from numba import cuda, float32

BLOCK = 256


@cuda.jit
def block_sums_kernel(x, partials):
    buf = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + t
    buf[t] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 32:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    if t < 32:
        while s > 0:
            v = buf[t] + buf[t + s]
            cuda.syncwarp(0xFFFF)
            buf[t] = v
            cuda.syncwarp(0xFFFF)
            s //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


def block_sums(x, partials):
    block_sums_kernel[partials.shape[0], BLOCK](x, partials)
