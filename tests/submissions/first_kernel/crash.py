# Dereferences a null pointer through ctypes: the static check refuses ctypes in an exercise that
# forbids calls, before anything runs.
import ctypes


def vector_add(a, b, out):
    ctypes.string_at(0)
