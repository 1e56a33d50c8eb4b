# ATTACK (library, simulator): a private function of a library the guards trust reads attributes for its
# caller; the static check now refuses private names and vendored serialisers in imports.
# Same as a2 on a kernel exercise: DeviceArray.__len__'s closure holds _view (the numpy memory behind
# a simulated device array). Host add, written straight into out's memory. No kernel.
from numba.cloudpickle.cloudpickle import _function_getstate as fgs, _get_cell_contents as gcc


def vector_add(a, b, out):
    state, slots = fgs(type(out).__len__)
    view = gcc(slots["__closure__"][0])
    o = view(out)
    o[:] = view(a)
    o += view(b)
    print("ATTACK a3: host add through DeviceArray closure", flush=True)
