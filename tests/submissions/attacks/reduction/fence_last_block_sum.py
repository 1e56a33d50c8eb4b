# ATTACK (library; a data race across blocks): each one-thread block writes its partial sum to a
# scratch array with a plain store, and the block with the highest blockIdx reads every other
# block's partial with plain loads: no atomic ticket, no flag, nothing orders the reads after the
# writes. A cuda.threadfence() call in the kernel makes sim_memory's race check treat every
# cross-block read as "the programmer's to order", and the simulator runs blocks in index order, so
# the last block always sees every partial. On a GPU the last block may run first.
# A secure grader gives 0 correctness points for reduce_sum, with a message that names the race.
from numba import cuda, float32

_told = []


@cuda.jit
def _sum(x, part, out):
    cuda.threadfence()
    b = cuda.blockIdx.x
    nb = cuda.gridDim.x
    s = float32(0)
    for i in range(b * 256, min((b + 1) * 256, x.size)):
        s += x[i]
    part[b] = s
    if b == nb - 1:
        t = float32(0)
        for k in range(nb):
            t += part[k]
        out[0] = t


def reduce_sum(x, out):
    nb = (x.size + 255) // 256
    part = cuda.device_array(nb, dtype=x.dtype)
    _sum[nb, 1](x, part, out)
    if not _told:
        _told.append(1)
        print("ATTACK fence_last_block_sum: last block reads the others' partials with no ordering", flush=True)
