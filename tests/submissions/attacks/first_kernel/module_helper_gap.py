# ATTACK (library; past the static check by a gap it had until it read all graded code): the static check
# read the exercise's function, what it names, and the module's top-level statements, but not the
# functions those statements called: a helper called at load could `import gc` and `import sys`. It looks for
# the runner's guard with gc.get_objects to switch it off.
# A secure grader gives 0 points for vector_add: the static check refuses its imports, and the audit hook gc.get_objects.
def _prepare():
    import gc
    import sys

    print(f"ATTACK module_helper_gap: imported {gc.__name__} and {sys.__name__} past the static check", flush=True)
    for o in gc.get_objects():
        if type(o).__name__ == "Guard":
            o.active = False


_prepare()


def vector_add(a, b, out):
    out[:] = a + b
