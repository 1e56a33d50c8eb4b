# ATTACK (library, simulator): numba's compiler front end builds a function's IR, closure values
# included: run on the device array's shape property, it hands over the function that returns the
# grader's NumPy memory, and the add is done on the host.
from numba import cuda
from numba.core.compiler import run_frontend


def _grab(prop):
    found = None
    func_ir = run_frontend(prop.fget)
    for blk in func_ir.blocks.values():
        for st in blk.body:
            v = st.value if type(st).__name__ == "Assign" else None
            if type(v).__name__ == "FreeVar":
                found = v.value
    return found


def vector_add(a, b, out):
    view = _grab(type(a).shape)
    va, vb, vo = view(a), view(b), view(out)
    vo[...] = va + vb
