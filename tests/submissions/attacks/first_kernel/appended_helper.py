# ATTACK (library, simulator): the static check reads the exercise function, the top-level names it
# reaches, and each top-level statement's own syntax. A helper that only an expression statement puts
# in a list (HOOK.append(_impl)) is reached by neither: HOOK is bound by `HOOK = []`, and the statement
# names _impl without the check walking _impl's body. The helper reads the grader's NumPy views through
# the device array's shape property (its getter closes over the function that returns them) and adds
# them with the ndarray + operator (no numpy.* function). No kernel runs.
HOOK = []


def _impl(a, b, out):
    view = type(out).shape.fget.__closure__[0].cell_contents
    view(out)[...] = view(a) + view(b)
    print("ATTACK appended_helper: added on the host through the shape property's closure", flush=True)


HOOK.append(_impl)


def vector_add(a, b, out):
    HOOK[0](a, b, out)
