# ATTACK (library; an intra-warp data race): each thread writes its partial sum to a shared slot,
# and lane 0 of each warp then reads the 31 slots its warp's other lanes wrote, with no
# cuda.syncwarp() (nor cuda.syncthreads()) between the writes and the reads: only a shuffle
# (cuda.shfl_sync, here fetching lane 0's thread index), which makes no shared-memory write of one
# lane visible to another. On a GPU (independent thread scheduling since Volta) lane 0 may read slots
# not yet written, and compute-sanitizer's racecheck reports the hazard. The grader's simulator makes
# every shuffle a barrier of all 32 lanes (sim_warps), so the slots are always written by then.
# A secure grader gives 0 correctness points for reduce_sum, with a message that names the race and
# its line.
from numba import cuda, float32

FULL = 0xFFFFFFFF
_told = []


@cuda.jit
def _zero(out):
    out[0] = 0


@cuda.jit
def _sum(x, out):
    slots = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    acc = float32(0)
    i = cuda.grid(1)
    while i < x.size:
        acc += x[i]
        i += cuda.gridsize(1)
    slots[t] = acc
    first = cuda.shfl_sync(FULL, t, 0)      # the warp's first thread: its lanes' slots start there
    if t % 32 == 0:
        s = float32(0)
        for k in range(32):
            s += slots[first + k]           # written by the other lanes: no syncwarp before this read
        cuda.atomic.add(out, 0, s)


def reduce_sum(x, out):
    _zero[1, 1](out)
    _sum[min((x.size + 255) // 256, 4), 256](x, out)
    if not _told:
        _told.append(1)
        print("ATTACK warp_slots_no_syncwarp: read other lanes' slots without a syncwarp", flush=True)
