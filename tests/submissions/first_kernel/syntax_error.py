from numba import cuda

def vector_add(a, b, out)
    pass
