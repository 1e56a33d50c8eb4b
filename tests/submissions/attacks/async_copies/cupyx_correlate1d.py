# ATTACK (library, GPU): the stencil from cupyx.scipy.ndimage.correlate1d (zeros outside x), the
# weights built on the host with NumPy: right answers at library speed, with no kernel at all.
# A secure grader gives 0 points for stencil_pipeline: the names are forbidden.
import numpy as np
import cupy as cp
from cupyx.scipy import ndimage

W = (np.arange(-8, 9) ** 2 + 1.0).astype(np.float32)
W /= W.sum()


def stencil_pipeline(x, y):
    ndimage.correlate1d(x, cp.asarray(W), mode="constant", cval=0.0, output=y)
