# ATTACK (library, Gradescope): the lab's reference through the installed grader. pydoc.locate imports a
# module by its dotted name (no import statement, no importlib), and the grader installed in Gradescope's
# virtual environment is on the path: where submissions run unsandboxed, the reference kernel answers.
# A secure grader gives 0 points for vector_add: the grader's packages are not importable or readable.
import pydoc

_reference = None
try:
    _lab = pydoc.locate("autograder.labs.first_kernel")
    _reference = _lab.LAB.exercise("vector_add").baseline
except Exception as exc:  # noqa: BLE001 - the attack reports what stopped it
    print(f"ATTACK reference_pydoc: {type(exc).__name__}: {exc}"[:300], flush=True)
print(f"ATTACK reference_pydoc: {'found the reference' if _reference else 'no reference reachable'}", flush=True)


def vector_add(a, b, out):
    _reference(a, b, out)
