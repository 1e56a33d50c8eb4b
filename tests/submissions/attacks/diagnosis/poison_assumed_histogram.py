# ATTACK (library; an output read before it is written): the bins are never zeroed. The grader
# starts every integer output at its fixed sentinel POISON_INT (-123456789, measure.py), and
# sim_memory counts the grader's own buffers as initialised, so reading them before any write is no
# "uninitialised read". The kernel adds the counts atomically onto the sentinel and a second kernel
# subtracts the sentinel. On a GPU, in a learner's own program, bins holds whatever was there before
# and the counts are garbage.
# A secure grader gives 0 correctness points for histogram (an output read before it was written).
from numba import cuda

_told = []
SENTINEL = -123456789


@cuda.jit
def _count(x, bins):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(bins, x[i], 1)


@cuda.jit
def _unpoison(bins):
    i = cuda.grid(1)
    if i < bins.size:
        bins[i] = bins[i] - SENTINEL


def histogram(x, bins):
    _count[(x.size + 255) // 256, 256](x, bins)
    _unpoison[(bins.size + 255) // 256, 256](bins)
    if not _told:
        _told.append(1)
        print("ATTACK poison_assumed_histogram: counted onto the grader's sentinel", flush=True)
