# ATTACK (library; reads uninitialised shared memory): two shared arrays declared on one line share
# one allocation in the grader's simulator. sim_memory.shared_array keys a shared array by its
# caller's (file, line) -- and the launch's cache by (block, that site) -- so the second
# cuda.shared.array(...) of the line returns the first array. The kernel stores x into `s` and then
# reduces `t`, which no thread ever writes: on a GPU `t` is a separate, uninitialised array and the
# partial sums are garbage; in the simulator `t` *is* `s`, so the tree sums x and no uninitialised
# read is reported.
# A secure grader gives 0 correctness points for block_sums (an uninitialised shared-memory read).
from numba import cuda, float32

_told = []


@cuda.jit
def _sums(x, partials):
    s = cuda.shared.array(256, float32); t = cuda.shared.array(256, float32)  # noqa: E702
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * 256 + tid
    if i < x.size:
        s[tid] = x[i]
    else:
        s[tid] = float32(0)
    cuda.syncthreads()
    stride = 128
    while stride > 0:
        if tid < stride:
            t[tid] = t[tid] + t[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        partials[cuda.blockIdx.x] = t[0]


def block_sums(x, partials):
    _sums[partials.size, 256](x, partials)
    if not _told:
        _told.append(1)
        print("ATTACK same_line_shared_alias: reduced a shared array no thread wrote", flush=True)
