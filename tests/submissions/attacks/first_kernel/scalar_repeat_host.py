# ATTACK (library): plain NumPy arrays made without naming a NumPy function (a numpy scalar's
# .repeat, allowed as np.float32 is), filled by a copying kernel, added on the host with ndarray
# operators (no function guard sees them) and copied back by a second kernel. Every kernel only
# copies; the addition is NumPy's on the host. (On a GPU the arrays go through Numba's implicit
# transfers, made in Numba's frames.)
# A secure grader gives 0 points for vector_add.
import numpy as np
from numba import cuda

_told = []


@cuda.jit
def _copy(src, dst):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i]


def vector_add(a, b, out):
    n = out.size
    ha = np.float32(0).repeat(n)
    hb = np.float32(0).repeat(n)
    blocks = (n + 255) // 256
    _copy[blocks, 256](a, ha)
    _copy[blocks, 256](b, hb)
    total = ha + hb
    _copy[blocks, 256](total, out)
    if not _told:
        _told.append(1)
        print("ATTACK scalar_repeat_host: added on the host between copying kernels", flush=True)
