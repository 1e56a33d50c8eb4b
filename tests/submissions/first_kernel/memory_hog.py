# Allocates host memory without bound (the test run sets a 1 GB limit).
_hoard = []


def vector_add(a, b, out):
    while True:
        _hoard.append(b"x" * 200_000_000)
