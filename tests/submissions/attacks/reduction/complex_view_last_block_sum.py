# ATTACK (race the simulator misses): the last block reads every other block's partial sum with no
# fence and no ticket (on a GPU it may run before they have written). sim_memory keys each access by
# its flat element, the byte offset // the allocation's itemsize, so an access through a wider view
# is checked against its FIRST element only. Partials go to the odd float32 slots of a scratch
# array; the last block's thread 0 writes each even slot itself, then reads slot pair j through a
# complex64 view of the same memory: the read is keyed on the even slot (its own write: no race),
# and .imag carries the other block's partial, unchecked. The simulator runs blocks one after another,
# so the sum is right there.
from numba import cuda, float32

_told = []


@cuda.jit
def _sum(x, s32, sc, out):
    buf = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    i = b * 256 + t
    buf[t] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    s = 128
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        s32[2 * b + 1] = buf[0]
        if b == cuda.gridDim.x - 1:
            total = float32(0)
            for j in range(cuda.gridDim.x):
                s32[2 * j] = float32(0)
                total += sc[j].imag
            out[0] = total


def reduce_sum(x, out):
    nb = (x.shape[0] + 255) // 256
    s32 = cuda.device_array(2 * nb, "float32")
    _sum[nb, 256](x, s32, s32.view("complex64"), out)
    if not _told:
        _told.append(1)
        print("ATTACK complex_view_last_block_sum: last block read partials with no ticket", flush=True)
