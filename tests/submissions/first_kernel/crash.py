# Dereferences a null pointer: the process dies with a segmentation fault.
import ctypes


def vector_add(a, b, out):
    ctypes.string_at(0)
