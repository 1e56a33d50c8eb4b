# MISTAKE (library): the stencil from CuPy's library, cupy.convolve, with no kernel of the learner's.
# The weights are symmetric, so a convolution is the stencil. The name is forbidden: 0 points.
import cupy as cp
import numpy as np

W = (np.arange(-8, 9) ** 2 + 1.0).astype(np.float32)
W /= W.sum()


def stencil_pipeline(x, y):
    y[...] = cp.convolve(x, cp.asarray(W), mode="same")
