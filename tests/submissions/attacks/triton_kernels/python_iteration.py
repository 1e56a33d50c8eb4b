# ATTACK (library): no torch name and no method: the rows and values read by iterating the tensor in
# Python (float() of each element), the softmax done in Python, and each value written by a Triton
# kernel that only stores the number it is given.
# A secure grader gives 0 points for softmax.
import math

import triton
import triton.language as tl


@triton.jit
def _put(out, i, value):
    tl.store(out + i, value)


def softmax(x, out):
    cols = x.shape[1]
    for r, row in enumerate(x):
        vals = [float(v) for v in row]
        top = max(vals)
        es = [math.exp(v - top) for v in vals]
        s = sum(es)
        for c, e in enumerate(es):
            _put[(1,)](out, r * cols + c, e / s)
