"""Triton's interpreter (TRITON_INTERPRET=1), which runs Triton kernels on the CPU in simulator mode.

course.setup() switches the interpreter on (course/device.py). This module mends one bug of it:
a scalar argument is held as a one-element NumPy array, and the interpreter turns it into a
Python int with ``int(array)``, which NumPy 2.4 refuses. So ``range(0, K, BLOCK_K)`` over a
runtime ``K``, the loop of every matrix product, fails with "only 0-dimensional arrays can be
converted to Python scalars" (https://github.com/triton-lang/triton/issues/9171; fixed upstream
by https://github.com/triton-lang/triton/pull/9172). On a GPU nothing here runs.
"""
from __future__ import annotations


def mend_scalar_index() -> bool:
    """Make the interpreter's ``int(scalar)`` work on NumPy 2.4 (idempotent); False without Triton."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    if getattr(interpreter._patch_lang_tensor, "_course_mended", False):
        return True
    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        # the upstream fix: squeeze the one-element array before int()
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor._course_mended = True
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
