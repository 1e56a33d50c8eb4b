# ATTACK (library, simulator): inside a one-thread kernel, a match statement's class pattern
# unwraps the simulator's kernel-argument wrapper (its _item, a FakeCUDAArray) and that array's
# _ary (the NumPy array): private attributes, read without an Attribute node the static check would
# refuse. Inside a simulated kernel the guard allows every access, so NumPy's sum does the work.
# A secure grader gives 0 points for reduce_sum.
from numba import cuda

_told = []


@cuda.jit
def _whole(x, out):
    match (x, out):
        case (object(_item=object(_ary=values)), object(_item=object(_ary=total))):
            total[0] = values.sum(dtype="float64")
    if not _told:
        _told.append(1)
        print("ATTACK match_item_ary: NumPy's sum on arrays unwrapped by a match pattern", flush=True)


def reduce_sum(x, out):
    _whole[1, 1](x, out)
