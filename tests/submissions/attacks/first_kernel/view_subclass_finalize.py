# ATTACK (library, simulator): no kernel at all. The simulator's device array keeps its memory in a
# closure, but DeviceArray.view(dtype) passes its argument to ndarray.view unchecked: given a
# subclass of ndarray (the type of a NumPy scalar's .repeat, no numpy.* name), NumPy calls the
# subclass's __array_finalize__ with the array the view is made from: the grader's own buffer. The
# sum is NumPy's + on the host, written straight into out's memory.
# A secure grader gives 0 points for vector_add.
_told = []
_seen = []


def _raw(arr):
    nd = type(arr.dtype.type(0).repeat(1))

    class Leak(nd):
        def __array_finalize__(self, obj):
            _seen.append(obj)

    _seen.clear()
    arr.view(Leak)
    return _seen[0]


def vector_add(a, b, out):
    _raw(out)[...] = _raw(a) + _raw(b)
    if not _told:
        _told.append(1)
        print("ATTACK view_subclass_finalize: NumPy's add on the host into the grader's buffer", flush=True)
