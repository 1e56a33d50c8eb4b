# ATTACK (library, runs past the static check): lab_reference_kernel without an import statement. The lab
# module is found by pkgutil.resolve_name (a string); failing that, its source is looked for at the
# course's checkout, whose path the sandbox's own command line names (/proc/1/cmdline).
# A secure grader gives 0 points for vector_add: the grader's code is not importable (nor readable) from
# the learner's process.
import pathlib
import pkgutil


def _source():
    found = []
    for d in pathlib.Path("/proc").iterdir():
        try:
            args = (d / "cmdline").read_bytes().split(b"\0") if d.name.isdigit() else []
        except OSError:
            continue
        for a in args:
            if a.endswith(b"/autograder"):
                p = pathlib.Path(a.decode()) / "labs" / "first_kernel.py"
                try:
                    found.append(f"{p}: {len(p.read_text())} chars")
                except OSError as exc:
                    found.append(f"{p}: {type(exc).__name__}")
    return found


def vector_add(a, b, out):
    try:
        lab = pkgutil.resolve_name("autograder.labs.first_kernel")
    except ImportError:
        print(f"ATTACK lab_reference_pkgutil: no module; the source: {_source()[:3]}", flush=True)
        raise
    try:
        lab.LAB.exercise("vector_add").baseline(a, b, out)  # the speed baseline itself (needs a GPU)
    except Exception:
        out[:] = lab.LAB.exercise("vector_add").reference(a=a, b=b)["out"]
