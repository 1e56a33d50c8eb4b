# ATTACK (library, simulator): the static check reads the exercise function, what it names, and what
# runs at load; a method of a class that the function never names is read by neither (a class body's
# methods count only for their decorators and defaults). An instance made at load registers itself in
# a list; the function calls list[0](...), naming only the list. The method then walks the device array's
# own property (DeviceArray.shape's fget closes over sim_memory's _view) to the grader's NumPy views and
# adds them with ndarray operators (no numpy.* function is called). The run-time guards refuse the
# reflection builtins, not attribute syntax like .__closure__ and .cell_contents.
from numba import cuda

HOOKS = []


class _Helper:
    def __init__(self):
        HOOKS.append(self)

    def __call__(self, *arrays):
        view = type(arrays[-1]).shape.fget.__closure__[0].cell_contents
        if len(arrays) == 3:
            vs = [view(x) for x in arrays]
            vs[2][...] = vs[0] + vs[1]
        else:
            alpha, x, y, out = arrays
            vs = [view(v) for v in (x, y, out)]
            vs[2][...] = (vs[0] * alpha + vs[1]).astype(vs[2].dtype)
        print("ATTACK hidden_init_closure: added on the host through the shape property's closure", flush=True)


_Helper()


def vector_add(a, b, out):
    HOOKS[0](a, b, out)


def saxpy(alpha, x, y, out):
    HOOKS[0](alpha, x, y, out)
