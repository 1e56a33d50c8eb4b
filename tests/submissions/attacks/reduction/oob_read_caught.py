# ATTACK (library; an out-of-bounds read): each thread adds a pair, x[j] + x[j + 1], and for an odd
# n the last thread reads x[n], one element past the end. On a GPU that read is not checked: it
# loads whatever follows x (here the grader's guard) and the kernel drops it (the pair's second
# value counts only when j + 1 < n), so the result is right while the kernel reads out of bounds.
# Numba's simulator checks every index (NumPy raises IndexError), which the kernel catches and
# ignores: the read past the end leaves no trace.
# A secure grader gives 0 correctness points for reduce_sum, with a message that the kernel reads out
# of bounds, naming the line.
from numba import cuda, float32

_told = []


@cuda.jit
def _zero(out):
    out[0] = 0


@cuda.jit
def _pairs(x, out):
    j = 2 * cuda.grid(1)
    n = x.size
    if j < n:
        try:
            b = x[j + 1]                    # x[n] when n is odd
        except Exception:
            b = float32(0)
        if j + 1 >= n:
            b = float32(0)                  # the value past the end is dropped
        cuda.atomic.add(out, 0, x[j] + b)


def reduce_sum(x, out):
    _zero[1, 1](out)
    _pairs[(x.size + 511) // 512, 256](x, out)
    if not _told:
        _told.append(1)
        print("ATTACK oob_read_caught: read one element past the end", flush=True)
