# ATTACK (library; a data race): the racy histogram that Lab 10 gives as the bug to find, submitted
# unchanged (the lab's cell, with `histogram` naming it). Each block counts into shared memory with
# counts[x[i]] += 1: a read, an add and a write, not one step, so two threads of a block that meet
# the same bin lose a count (compute-sanitizer's racecheck reports it; on a GPU the bins come out
# short). Numba's simulator runs a block's threads as Python threads that rarely switch inside that
# statement, so every count arrives.
# A secure grader gives 0 correctness points for histogram, with a message that names the race and
# its line.
from numba import cuda, int32

_told = []

MAX_BINS = 1024


@cuda.jit
def zero_kernel(bins):
    i = cuda.grid(1)
    if i < bins.size:
        bins[i] = 0


@cuda.jit
def racy_histogram_kernel(x, bins):
    counts = cuda.shared.array(MAX_BINS, int32)     # this block's private bins
    t = cuda.threadIdx.x
    for k in range(t, bins.size, cuda.blockDim.x):
        counts[k] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    while i < x.size:
        counts[x[i]] += 1                           # read, add, write: not one step
        i += cuda.gridsize(1)
    cuda.syncthreads()
    for k in range(t, bins.size, cuda.blockDim.x):
        cuda.atomic.add(bins, k, counts[k])


def racy_histogram(x, bins):
    zero_kernel[(bins.size + 255) // 256, 256](bins)
    racy_histogram_kernel[min((x.size + 2047) // 2048, 1024), 256](x, bins)
    if not _told:
        _told.append(1)
        print("ATTACK racy_histogram_lab10: counted without atomics", flush=True)


histogram = racy_histogram
