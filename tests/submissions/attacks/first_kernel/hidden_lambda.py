# ATTACK (library): the host copies hide in a module-level lambda; the static check follows only
# top-level functions, so it never reads the lambda. (Today's run-time guard does catch this one: the
# lambda's line names copy_to_host.)
# A secure grader gives 0 points for vector_add.
_host_sum = lambda a, b: a.copy_to_host() + b.copy_to_host()  # noqa: E731
_upload = lambda out, h: out.copy_to_device(h)  # noqa: E731


def vector_add(a, b, out):
    _upload(out, _host_sum(a, b))
