# ATTACK (library; a data race): the racy global histogram (bins[x[i]] += 1, no atomics), launched
# as blocks of one thread so that every conflicting pair of accesses is between two blocks, with a
# cuda.threadfence() call. The simulator's race check stops ordering threads of different blocks in
# a launch that calls threadfence ("left to the programmer"), but a fence orders one thread's own
# accesses, never two read-modify-writes of one element: on a GPU the bins come out short. The
# kernel names no barrier, so its threads run one after another and every count arrives.
# A secure grader gives 0 correctness points for histogram, with a message that names the race.
from numba import cuda

_told = []


@cuda.jit
def _zero(bins):
    i = cuda.grid(1)
    if i < bins.size:
        bins[i] = 0


@cuda.jit
def _count(x, bins):
    cuda.threadfence()
    i = cuda.grid(1)
    while i < x.size:
        bins[x[i]] += 1
        i += cuda.gridsize(1)


def histogram(x, bins):
    _zero[(bins.size + 255) // 256, 256](bins)
    _count[1024, 1](x, bins)
    if not _told:
        _told.append(1)
        print("ATTACK fence_waives_race: counted in global memory without atomics, behind a threadfence", flush=True)
