"""check(profile=True) on a GPU sends the learner's function to a profiled process as source
(autograder/shipping.py): what it sends must define the same function again."""
from __future__ import annotations

import textwrap

import numpy as np

from autograder.shipping import source_of

NOTEBOOK = textwrap.dedent("""
    import math
    import numpy as np
    from numba import cuda, float32

    BLOCK = 64
    NEG_INF = np.float32(-np.inf)          # a NumPy scalar, not finite
    SCALES = {"a": 2.0, "b": (1, 2)}       # a dict of simple values
    BIG = np.zeros(3)                      # an array: not sent
    _compiled = None                       # a cache the function fills


    @cuda.jit(device=True)
    def clamp_low(v):
        return v if v > NEG_INF else float32(0)


    @cuda.jit
    def scale_kernel(x, out, s):
        i = cuda.grid(1)
        if i < x.shape[0]:
            out[i] = clamp_low(x[i]) * s + math.floor(0.5)


    def scale(x, out):
        global _compiled
        if _compiled is None:
            _compiled = scale_kernel
        _compiled[(x.shape[0] + BLOCK - 1) // BLOCK, BLOCK](x, out, SCALES["a"])
    """)


def _notebook(tmp_path):
    path = tmp_path / "notebook.py"
    path.write_text(NOTEBOOK)  # inspect.getsource reads the file, as it reads a notebook's cells
    ns = {"__name__": "__main__"}
    exec(compile(NOTEBOOK, str(path), "exec"), ns)
    return ns


def test_the_shipped_source_defines_the_function_again(tmp_path):
    ns = _notebook(tmp_path)
    x = np.array([1.0, -np.inf, 3.0], dtype=np.float32)
    want = np.zeros_like(x)
    ns["scale"](x, want)  # fills the cache: the shipped copy must still start from None
    shipped = source_of(ns["scale"])
    assert "NEG_INF = numpy.float32(float('-inf'))" in shipped
    assert "_compiled = None" in shipped and "SCALES = {'a': 2.0, 'b': (1, 2)}" in shipped
    assert "BIG" not in shipped.split("# not sent")[0], shipped  # unused by scale: never looked at
    again = {"__name__": "__main__"}
    exec(compile(shipped, str(tmp_path / "shipped.py"), "exec"), again)
    got = np.zeros_like(x)
    again["scale"](x, got)
    np.testing.assert_array_equal(got, want)
    assert list(want) == [2.0, 0.0, 6.0]


def test_a_value_that_cannot_be_sent_is_named_in_a_comment(tmp_path):
    ns = _notebook(tmp_path)
    exec(compile("def uses_big(x):\n    return BIG.size + x\n", str(tmp_path / "notebook.py"), "exec"), ns)
    (tmp_path / "notebook.py").write_text("def uses_big(x):\n    return BIG.size + x\n")
    shipped = source_of(ns["uses_big"])
    assert "# not sent" in shipped and "BIG (ndarray)" in shipped
