# ATTACK (library, GPU): copies x to the host, computes the stencil with NumPy and copies it back,
# through names that are not called as methods (the static check forbids *.get and *.set by name).
# A secure grader gives 0 points for stencil_pipeline.
import numpy as np
import cupy as cp

W = (np.arange(-8, 9) ** 2 + 1.0) / 425.0


def stencil_pipeline(x, y):
    host = cp.asnumpy(x).astype(np.float64)
    padded = np.pad(host, 8)
    out = sum(W[j] * padded[j:j + host.size] for j in range(17))
    y[...] = cp.asarray(out.astype(np.float32))
