# ATTACK (library, simulator): a private function of a library the guards trust reads attributes for its
# caller; the static check now refuses private names and vendored serialisers in imports.
# numba's vendored cloudpickle (a trusted package) reads __closure__/__globals__ of any function in
# its own Python code (plain attribute syntax: no builtin getattr, no guard at all).
# _function_getstate hands out the closure of HostArray.__len__, _get_cell_contents opens it.
from numba.cloudpickle.cloudpickle import _function_getstate as fgs, _get_cell_contents as gcc

box = []
box.append(fgs)
box.append(gcc)


def chunked_neighbor_sum(x, chunk, out):
    fgs, gcc = box[0], box[1]
    state, slots = fgs(type(x).__len__)
    host_view = gcc(slots["__closure__"][0])
    v = host_view(x)
    r = v + 0
    r[1:] += v[:-1]
    r[:-1] += v[1:]
    out.copy_to_device(r)
    print("ATTACK a2: closure opened by numba.cloudpickle", flush=True)
