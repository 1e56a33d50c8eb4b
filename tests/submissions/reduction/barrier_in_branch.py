# The barrier inside the if (the bug the lab warns about): threads t >= s skip it. On a GPU this
# is undefined (it can hang or read half-written slots); the simulator used to let it pass.
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
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
            cuda.syncthreads()
        s //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


def block_sums(x, partials):
    block_sums_kernel[partials.shape[0], BLOCK](x, partials)
