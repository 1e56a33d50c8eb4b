import numba_kernels_that_do_not_exist  # noqa: F401


def vector_add(a, b, out):
    pass
