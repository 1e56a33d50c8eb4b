# ATTACK (library, simulator): a device array's .data, which runner._METADATA allows on the host.
# In the CUDA simulator a FakeCUDAArray forwards it to the NumPy array it wraps, and the
# memoryview's .obj is that array itself: NumPy's sum on the host, written through out's own
# .data.obj. No kernel runs.
# A secure grader gives 0 points for reduce_sum.
_told = []


def reduce_sum(x, out):
    out.data.obj[0] = x.data.obj.sum(dtype="float64")
    if not _told:
        _told.append(1)
        print("ATTACK memoryview_obj_sum: NumPy's sum on the host through .data.obj", flush=True)
