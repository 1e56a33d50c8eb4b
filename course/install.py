"""What a notebook needs where it runs: the CUDA extra for the driver found, the notebook's own
extras, and numba-cuda in effect in the running kernel.

Every notebook starts with :func:`setup_cell`. Where the course is missing (Colab) it installs a
pinned release; then ``course.setup(extras=[...])`` calls :func:`ensure`. On Colab (or wherever
``GPU_COURSE_INSTALL=1``) that installs what is missing with pip; elsewhere it prints the pip
command instead, because a learner's own environment is theirs to change.

numba-cuda replaces numba's built-in CUDA target through a ``.pth`` file, which Python reads only
when it starts. Installed into a running kernel, it is switched on here by importing what that
file imports, which works as long as ``numba.cuda`` has not been imported yet. When it has been,
or when pip replaced a package the kernel had already loaded, the kernel restarts once.
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

DIST = "gpu-course"
REPO_URL = "https://github.com/open-gpu-course/gpu-course"
CUPYS = ("cupy-cuda12x", "cupy-cuda13x", "cupy")
# Modules with compiled parts that pip may replace under a running kernel: a stale copy needs a restart.
RELOAD_SENSITIVE = ("numpy", "numba", "llvmlite", "cupy", "torch", "onnxruntime")


# --------------------------------------------------------------------------- the first cell
def release_tag(version: str | None = None) -> str:
    """The git tag of this release: "v" and the package version (pyproject.toml's ``version``)."""
    return "v" + (version or metadata.version(DIST))


def release_spec(version: str | None = None) -> str:
    return f"{DIST} @ git+{REPO_URL}@{release_tag(version)}"


def clone_root() -> Path | None:
    """The clone of the course's repository this package is imported from (an editable install, or
    the checkout on sys.path); None for a package pip built and copied."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "_toc.yml").is_file() else None


def install_line(extras) -> str:
    """The pip command that adds ``extras`` to this installation of the course, in the form that fits
    how it was installed: from a clone, from the repository at a release, or from an index or wheel."""
    extras = ",".join(extras)
    root = clone_root()
    if root is not None:
        return f'pip install -e "{root}[{extras}]"'
    try:
        direct = json.loads(metadata.distribution(DIST).read_text("direct_url.json") or "null")
    except metadata.PackageNotFoundError:
        direct = None
    vcs = (direct or {}).get("vcs_info")
    if vcs:  # pip install "gpu-course @ git+URL@TAG", as the first cell does on Colab
        rev = vcs.get("requested_revision")
        return f'pip install "{DIST}[{extras}] @ {vcs["vcs"]}+{direct["url"]}{"@" + rev if rev else ""}"'
    return f'pip install "{DIST}[{extras}]"'


def setup_cell(extras: list[str] | tuple[str, ...] = (), version: str | None = None) -> str:
    """The first code cell of a notebook that needs ``extras`` (e.g. ["torch"]); one text for all."""
    args = f"extras={list(extras)!r}".replace("'", '"') if extras else ""
    return (
        "try:\n"
        "    import course\n"
        f"except ImportError:  # on Colab: install the course, release {release_tag(version)}\n"
        f'    %pip install -q "{release_spec(version)}"\n'
        "    import course\n"
        f"MODE = course.setup({args})  # GPU or simulator; on Colab it also installs what is missing"
    )


# --------------------------------------------------------------------------- what is here
def driver_cuda_version() -> int | None:
    """The newest CUDA the driver supports, as 1000 * major + 10 * minor; None without a driver."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        v = ctypes.c_int(0)
        return v.value if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 else None
    return None


def cuda_text(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cuda_extra(driver: int | None, cupys: set[str]) -> str | None:
    """The extra with CuPy and numba-cuda's CUDA pieces for this driver; None without a usable one.

    A CUDA 12 driver cannot run CUDA 13 code, so it gets cuda12. A CUDA 13 driver runs both: it
    gets cuda13 unless cupy-cuda12x is already there (Colab preinstalls it), since a second CuPy
    would shadow the first.
    """
    if driver is None or driver < 12000:
        return None
    if driver >= 13000 and not ("cupy-cuda12x" in cupys and "cupy-cuda13x" not in cupys):
        return "cuda13"
    return "cuda12"


def hosted() -> bool:
    """A throwaway notebook machine (Colab, or one marked so), where installing needs no asking."""
    return ("google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
            or os.environ.get("GPU_COURSE_INSTALL") == "1")


def known_extras() -> list[str]:
    return sorted(metadata.metadata(DIST).get_all("Provides-Extra") or [])


def requirements(extras) -> list[str]:
    """The course's own requirements plus those of ``extras``, from the installed package."""
    from .wheelhouse import requirements as reqs

    return reqs(list(extras))


def unmet(reqs, _seen=None) -> list[str]:
    """The requirements (strings) that installed packages do not satisfy, extras of a dependency included."""
    from packaging.requirements import Requirement

    seen = set() if _seen is None else _seen
    missing = []
    for text in reqs:
        req = Requirement(text)
        version = installed_version(req.name)
        if version is None or not req.specifier.contains(version, prereleases=True):
            missing.append(text)
            continue
        for extra in sorted(req.extras):
            if (req.name, extra) in seen:
                continue
            seen.add((req.name, extra))
            own = []  # what the dependency needs for this extra only
            for line in metadata.requires(req.name) or []:
                dep = Requirement(line)
                if dep.marker is not None and dep.marker.evaluate({"extra": extra}) \
                        and not dep.marker.evaluate({"extra": ""}):
                    dep.marker = None
                    own.append(str(dep))
            if unmet(own, seen):
                missing.append(text)
                break
    return missing


def numba_cuda_state(probe: bool = True) -> str:
    """"active", "inactive" (installed, but numba.cuda would be numba's own), "shadowed" (numba's own
    numba.cuda is already imported), or "missing" (not installed).

    With ``probe`` it asks the import system where numba.cuda would come from, which imports numba
    (not numba.cuda); without, a loaded redirector counts as active.
    """
    if installed_version("numba-cuda") is None:
        return "missing"
    loaded = sys.modules.get("numba.cuda")
    if loaded is not None:
        return "active" if "numba_cuda" in (getattr(loaded, "__file__", "") or "") else "shadowed"
    if "_numba_cuda_redirector" not in sys.modules:
        return "inactive"
    if not probe:
        return "active"
    try:
        spec = importlib.util.find_spec("numba.cuda")
    except ImportError:
        return "inactive"
    return "active" if spec is not None and "numba_cuda" in (spec.origin or "") else "inactive"


def activate_numba_cuda() -> None:
    """Do what numba-cuda's ``_numba_cuda_redirector.pth`` does at interpreter start."""
    importlib.invalidate_caches()  # see what pip has just written
    try:
        importlib.import_module("_numba_cuda_redirector")
    except ImportError:
        pass


def stale_modules() -> list[str]:
    """Loaded modules whose package pip has since replaced: "numpy 2.0.2 (now 2.1.0)"."""
    loaded = {name: getattr(sys.modules[name], "__version__", None)
              for name in RELOAD_SENSITIVE if name in sys.modules}
    if not loaded:
        return []
    owners = metadata.packages_distributions()
    stale = []
    for name, version in loaded.items():
        on_disk = [installed_version(d) for d in owners.get(name, [])]
        if version is not None and not any(same_version(version, v) for v in on_disk):
            now = ", ".join(v for v in on_disk if v) or "removed"
            stale.append(f"{name} {version} (now {now})")
    return stale


def same_version(a, b) -> bool:
    from packaging.version import InvalidVersion, Version

    if a is None or b is None:
        return False
    try:
        return Version(str(a)) == Version(str(b))
    except InvalidVersion:
        return str(a) == str(b)


# --------------------------------------------------------------------------- acting on it
def pip_install(reqs: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *reqs],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pip could not install {' '.join(reqs)}:\n{(r.stdout + r.stderr).strip()}")


def restart_kernel(reason: str) -> None:
    """Stop this kernel so the front end starts a fresh one (Jupyter and Colab both do)."""
    print(f"{reason}\nRestarting the kernel once. When it is back, run this cell again and go on.",
          flush=True)
    try:
        from IPython import get_ipython

        in_kernel = getattr(get_ipython(), "kernel", None) is not None
    except ImportError:
        in_kernel = False
    if not in_kernel:
        raise RuntimeError(f"{reason} Restart Python and run again.")
    sys.stderr.flush()
    # The kernel sends what was printed on its I/O thread, then through ZeroMQ's: exiting at once
    # can lose the message above, under load. A moment is plenty for a local socket.
    time.sleep(1.0)
    os._exit(0)


def _install_what_is_missing(extras: list[str], verbose: bool) -> None:
    """On Colab, pip-install what this notebook needs; elsewhere, say what is missing and how to get it."""
    unknown = sorted(set(extras) - set(known_extras()))
    if unknown:
        raise ValueError(f"unknown extra {', '.join(unknown)}: the course has {', '.join(known_extras())}")
    driver = driver_cuda_version()
    cuda = cuda_extra(driver, {n for n in CUPYS if installed_version(n)})
    if hosted():
        wanted = requirements(extras + ([cuda] if cuda else []))
        missing = unmet(wanted)
        if missing:
            if verbose:
                why = f" for the CUDA {cuda_text(driver)} driver" if cuda else ""
                print(f"Installing what this notebook needs here{why}: {', '.join(missing)}", flush=True)
            pip_install(wanted)  # all of them, so pip keeps the course's pins while it adds the rest
    elif verbose:
        missing = unmet(requirements(extras))
        if missing:
            print(f"This notebook needs {', '.join(missing)}, not installed here: {install_line(extras)}")
        if cuda and not any(installed_version(n) for n in CUPYS):
            print(f"CuPy is not installed, so cells that use it will fail: {install_line([cuda])}")


def ensure(extras=(), verbose: bool = True) -> None:
    """Make this kernel ready for a notebook that needs ``extras``; see the module's docstring."""
    extras = list(extras)
    if installed_version(DIST) is not None:  # else a checkout on sys.path: no metadata to check against
        _install_what_is_missing(extras, verbose)
    state = numba_cuda_state(probe=False)
    if state == "inactive":
        activate_numba_cuda()
        state = numba_cuda_state()
        if state == "active" and verbose:
            print("numba-cuda, just installed, is in effect in this kernel: no restart needed.")
    stale = stale_modules()
    if state == "shadowed":
        restart_kernel("numba.cuda was imported before numba-cuda took effect, so this kernel has "
                       "numba's old built-in CUDA target.")
    elif stale:
        restart_kernel(f"pip replaced packages this kernel had already loaded: {', '.join(stale)}.")
    elif state == "inactive":
        print("numba-cuda is installed but numba does not use it: see `autograder doctor`.")


def with_setup_cell(source: str, extras=(), version: str | None = None) -> str:
    """A first code cell with its setup lines (up to ``MODE = course.setup(...)``) made :func:`setup_cell`."""
    lines = source.split("\n")
    end = next((i for i, line in enumerate(lines) if line.startswith("MODE = course.setup(")), None)
    if end is None:
        raise ValueError("this cell has no line starting with 'MODE = course.setup('")
    return "\n".join([setup_cell(extras, version)] + lines[end + 1:])


# --------------------------------------------------------------------------- the release's tag
def project_version(root: Path) -> str:
    """pyproject.toml's version, the one source of the release's tag (read without tomllib, which
    Python 3.10 lacks)."""
    import re

    text = (Path(root) / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'^\[project\]\s*$(?:(?!^\[).)*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    if m is None:
        raise ValueError(f"{root}/pyproject.toml has no version in [project]")
    return m.group(1)


def tag_release(root: Path) -> str:
    """The course's release step (`make tag`, once a release is committed): tag HEAD with the tag the
    notebooks' first cell installs, "v" and pyproject.toml's version. A tag that exists stays where
    it is. Returns what it did, in a sentence."""
    root = Path(root)
    tag = release_tag(project_version(root))

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    found = git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
    if found.returncode == 0:
        return f"{tag} exists, on {found.stdout.strip()[:12]}: left as it is."
    made = git("tag", "-a", tag, "-m", f"{DIST} {tag}")
    if made.returncode != 0:
        raise RuntimeError(f"git tag {tag} failed: {made.stderr.strip()}")
    head = git("rev-parse", "--short=12", "HEAD").stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    note = " Changes not committed are not in it." if dirty else ""
    return f"Tagged {head} as {tag}.{note} Publish it: git push origin {tag}"


if __name__ == "__main__":
    if sys.argv[1:] != ["tag"]:
        sys.exit("usage: python -m course.install tag")
    print(tag_release(Path(__file__).resolve().parent.parent))
