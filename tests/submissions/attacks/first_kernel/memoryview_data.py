# ATTACK (library, simulator): a device array's .data, which runner._METADATA allows on the host.
# In the CUDA simulator a FakeCUDAArray forwards it to the NumPy array it wraps: a writable
# memoryview of the values. The host adds them element by element in plain Python and writes
# them through out's memoryview; no kernel runs.
# A secure grader gives 0 points for vector_add.
_told = []


def vector_add(a, b, out):
    av, bv, ov = a.data, b.data, out.data
    for i in range(len(ov)):
        ov[i] = av[i] + bv[i]
    if not _told:
        _told.append(1)
        print("ATTACK memoryview_data: added on the host through .data", flush=True)
