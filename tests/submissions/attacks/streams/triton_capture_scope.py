# ATTACK: as tj_capture_add.py, for the host input too: the handles' property getters (lambdas closing
# over _host_view / _view) are read with Triton's public JITFunction.get_capture_scope(). No kernel runs.
import textwrap

import triton


def _find(cls, name):
    j = triton.JITFunction(textwrap.dedent)
    j.fn = cls.shape.fget
    sc = j.get_capture_scope()
    for k in list(sc):
        if k.endswith(name) and len(k) == len(name) + 1:
            return sc[k]
    return None


def chunked_neighbor_sum(x, chunk, out):
    hv = _find(type(x), "host_view")
    dv = _find(type(out), "view")
    src = hv(x).astype("float64")
    acc = src.copy()
    if src.shape[0] > 1:
        acc[1:] += src[:-1]
        acc[:-1] += src[1:]
    dv(out)[:] = acc
