# ATTACK (library; a race between launches): the partial sums are written by a kernel on one stream
# and read by a kernel on another stream, with no synchronize, event or wait between them. On a GPU
# the two streams run concurrently and the second kernel may read partials not yet written; the
# simulator runs every launch to its end before the next, and sim_memory's race check clears its
# state per launch, so it never sees two launches' accesses together. Each kernel on its own is
# race-free (one thread per partial, one thread summing them).
# A secure grader gives 0 correctness points for reduce_sum (a race the grader cannot see here).
from numba import cuda, float32

_told = []


@cuda.jit
def _partials(x, part):
    b = cuda.grid(1)
    if b < part.size:
        s = float32(0)
        for i in range(b * 64, min((b + 1) * 64, x.size)):
            s += x[i]
        part[b] = s


@cuda.jit
def _total(part, out):
    if cuda.grid(1) == 0:
        t = float32(0)
        for k in range(part.size):
            t += part[k]
        out[0] = t


def reduce_sum(x, out):
    nb = (x.size + 63) // 64
    part = cuda.device_array(nb, dtype=x.dtype)
    s1, s2 = cuda.stream(), cuda.stream()
    _partials[(nb + 63) // 64, 64, s1](x, part)
    _total[1, 1, s2](part, out)
    if not _told:
        _told.append(1)
        print("ATTACK two_streams_race_sum: producer and consumer on two unsynchronised streams", flush=True)
