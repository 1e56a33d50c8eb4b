# ATTACK (library, runs past the static check): frozen_filename without exec/compile in the source. The
# builtins come from pkgutil.resolve_name and are called through functools.singledispatch, so the audit
# hook sees functools raise 'compile' and 'exec'; the code is compiled under the file name
# '<frozen importlib._bootstrap>', and its copies and add run in code the guard does not know.
# A secure grader gives 0 points for vector_add.
import functools
import pkgutil

_SRC = "def _impl(a, b, out):\n    out.copy_to_device(a.copy_to_host() + b.copy_to_host())\n"
_ns: dict = {}
_code = functools.singledispatch(pkgutil.resolve_name("builtins.compile"))(_SRC, "<frozen importlib._bootstrap>",
                                                                           "exec")
functools.singledispatch(pkgutil.resolve_name("builtins.exec"))(_code, _ns)
print(f"ATTACK frozen_filename_singledispatch: compiled and ran a string: {'_impl' in _ns}", flush=True)


def vector_add(a, b, out):
    _ns["_impl"](a, b, out)
