# Allocates host memory without bound (the test run sets a 1 GB limit).
import numpy as np

_hoard = []


def vector_add(a, b, out):
    while True:
        _hoard.append(np.ones(50_000_000))
