"""Triton's interpreter (TRITON_INTERPRET=1) with NumPy 2.4: one fix, applied once.

The interpreter holds every scalar as a NumPy array of shape (1,), and turns one into a Python
int with ``int(array)`` (a loop bound taken from a kernel argument or a program id) or into a
bool with ``bool(array)``. NumPy 2.4 refuses both for arrays that are not zero-dimensional. The
fix takes the array's one element instead. It changes nothing on a GPU, where kernels are compiled.
"""
from __future__ import annotations

import os


def patch_interpreter() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return
    from triton.runtime import interpreter

    if getattr(interpreter, "_scalars_fixed", False):
        return
    original = interpreter._patch_lang_tensor

    def patched(tensor, scope) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
        scope.set_attr(tensor, "__bool__",
                       lambda self: bool(self.handle.data.reshape(-1)[0]) if self.handle.data.size == 1 else True)

    interpreter._patch_lang_tensor = patched
    interpreter._scalars_fixed = True
