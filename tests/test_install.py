"""The first cell of every notebook: on Colab it installs a pinned release of the course, the extras the
notebook needs and the CUDA pieces that fit the driver, and it switches numba-cuda on in the running
kernel (or restarts it once when it cannot).

The last three tests run that cell in a fresh virtual environment holding Colab's preinstalled versions
of numpy, numba and CuPy, with pip's git clone of the release redirected to a tagged copy of this
working tree. The environment is cached in the temporary directory, keyed by the versions.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

from course import install
from course.install import cuda_extra, release_tag, setup_cell, unmet, with_setup_cell
from course.notebooks import executed_notebooks, student_notebooks

ROOT = Path(__file__).resolve().parent.parent
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# What a Colab runtime has before the first cell runs (2025): numpy, numba, CuPy for CUDA 12, and its
# IPython kernel. Colab runs Python 3.12; this machine has 3.11, which these versions also support.
COLAB = ["numpy==2.0.2", "numba==0.60.0", "cupy-cuda12x==13.3.0", "ipykernel==6.17.1", "ipython==7.34.0",
         "matplotlib==3.10.0", "packaging==24.2"]


# --------------------------------------------------------------------------- the cell and its choices
def test_the_cell_installs_a_tagged_release():
    cell = setup_cell(["torch"])
    tag = "v" + PYPROJECT["version"]
    assert release_tag() == tag, "reinstall the course (pip install -e .): its metadata is older than pyproject.toml"
    assert f'%pip install -q "gpu-course @ git+https://github.com/open-gpu-course/gpu-course@{tag}"' in cell
    assert 'MODE = course.setup(extras=["torch"])' in cell
    assert "MODE = course.setup()" in setup_cell()


def test_with_setup_cell_keeps_the_rest_of_the_cell_and_is_idempotent():
    old = ('try:\n    import course\nexcept ImportError:\n    %pip install -q "gpu-course @ git+x"\n'
           '    import course\nMODE = course.setup()\n\nimport math\ncheck = 1')
    new = with_setup_cell(old, ["llm"])
    assert new.startswith(setup_cell(["llm"])) and new.endswith("\n\nimport math\ncheck = 1")
    assert with_setup_cell(new, ["llm"]) == new
    with pytest.raises(ValueError, match="MODE = course.setup"):
        with_setup_cell("import course", [])


@pytest.mark.parametrize("driver, cupys, extra", [
    (None, set(), None),                       # no driver: the simulator needs neither
    (11080, set(), None),                      # CUDA 11 is too old for the course
    (12040, set(), "cuda12"),                  # Colab's driver
    (12040, {"cupy-cuda12x"}, "cuda12"),
    (13000, set(), "cuda13"),
    (13000, {"cupy-cuda12x"}, "cuda12"),      # keep the CuPy that is there: it runs on a newer driver
    (13000, {"cupy-cuda12x", "cupy-cuda13x"}, "cuda13"),
])
def test_the_cuda_extra_follows_the_driver(driver, cupys, extra):
    assert cuda_extra(driver, cupys) == extra


def test_each_cuda_extra_pins_cupy_and_numba_cuda_for_its_cuda_major():
    for extra, major in (("cuda12", "12"), ("cuda13", "13")):
        reqs = {Requirement(r).name: Requirement(r) for r in PYPROJECT["optional-dependencies"][extra]}
        assert set(reqs) == {f"cupy-cuda{major}x", "numba-cuda"}
        assert reqs["numba-cuda"].extras == {f"cu{major}"}


def test_unmet_looks_into_a_dependencys_extra():
    """numba-cuda itself is installed here; only its cu13 extra's CUDA 13 pieces are (the ptx extra)."""
    assert unmet(["numba-cuda>=0.30,<0.31"]) == []
    assert unmet(["numba-cuda[cu13]>=0.30,<0.31"]) == []
    assert unmet(["numba-cuda[cu12]>=0.30,<0.31"]) == ["numba-cuda[cu12]>=0.30,<0.31"]
    assert unmet(["numba-cuda>=99"]) == ["numba-cuda>=99"]
    assert unmet(["no-such-package-here"]) == ["no-such-package-here"]


def test_a_package_replaced_under_the_kernel_is_stale(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", types.SimpleNamespace(__version__="0.1.0"))
    assert any(s.startswith("numba 0.1.0 (now ") for s in install.stale_modules())
    monkeypatch.setitem(sys.modules, "numba", types.SimpleNamespace(__version__=install.installed_version("numba")))
    assert not any(s.startswith("numba ") for s in install.stale_modules())


def test_an_unknown_extra_is_refused():
    with pytest.raises(ValueError, match="unknown extra torhc: the course has .*torch"):
        install.ensure(["torhc"], verbose=False)


def numba_cuda_states(then: str) -> list[str]:
    """numba_cuda_state() in a fresh Python whose redirector (numba-cuda's .pth) was undone, then after ``then``."""
    code = ("import sys\nimport _numba_cuda_redirector as r\n"
            "sys.meta_path.remove(r.finder); del sys.modules['_numba_cuda_redirector']\n"
            "from course import install\nprint(install.numba_cuda_state())\n"
            f"{then}\nprint(install.numba_cuda_state())\n")
    return run([sys.executable, "-c", code], cwd=ROOT).stdout.split()


def test_numba_cuda_is_switched_on_in_a_running_python():
    assert install.numba_cuda_state() == "active"
    assert numba_cuda_states("install.activate_numba_cuda()") == ["inactive", "active"]
    assert numba_cuda_states("import numba.cuda") == ["inactive", "shadowed"]  # numba's own, too late to swap


def test_doctor_says_whether_cupy_fits_the_driver_and_whether_numba_cuda_is_on(monkeypatch):
    from course import doctor

    assert "does NOT match the CUDA 12.4 driver" in doctor.cupy_finding({"cupy-cuda13x": "14.0.0"}, 12040, True)
    assert "cupy-cuda12x 13.3.0, built for CUDA 12: matches the CUDA 13.0" in \
        doctor.cupy_finding({"cupy-cuda12x": "13.3.0"}, 13000, True)
    assert "not used in simulator mode" in doctor.cupy_finding({"cupy-cuda12x": "13.3.0"}, None, False)
    assert doctor.cupy_finding({}, 12040, True) == "CuPy: not installed"
    line, problem = doctor.numba_cuda_finding()
    assert line.startswith("numba-cuda: active") and problem is None
    monkeypatch.setattr(doctor, "numba_cuda_state", lambda: "inactive")
    line, problem = doctor.numba_cuda_finding()
    assert "NOT active" in line and ".pth" in problem


def needed_extras(nb: dict) -> list[str]:
    """The extras a notebook's code needs, read from what it imports and uses."""
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    imports = set(re.findall(r"^\s*(?:import|from)\s+(\w+)", code, re.M))
    if imports & {"onnx", "onnxruntime", "onnxscript", "fastapi", "uvicorn", "aiohttp"} \
            or re.search(r"\b(Server|make_app|run_load)\b", code):  # course.serving's server and load generator
        return ["llm"]
    if "triton" in imports:  # Part V: Triton, which needs torch too
        return ["triton"]
    return ["torch"] if "torch" in imports else []


@pytest.mark.parametrize("path", executed_notebooks() + student_notebooks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_notebook_starts_with_the_install_cell_for_its_extras(path):
    nb = json.loads(path.read_text())
    first = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert first.startswith(setup_cell(needed_extras(nb))), first[:400]


# --------------------------------------------------------------------------- the page's install lines
PAGE = ROOT / "how-to-use.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
PAGE_EXTRAS = re.compile(r'(?:gpu-course|\.)\[([\w,-]+)\]')


def page_install_lines() -> dict[str, list[str]]:
    """The pip lines in how-to-use.md's code blocks, as the page prints them, by situation: "clone"
    (in the block that clones the repository), "package" (the course from its repository at a release),
    "colab" (a notebook's first cell) and "other" (an instructor's, from a wheelhouse)."""
    found: dict[str, list[str]] = {"clone": [], "package": [], "colab": [], "other": []}
    for _, block in FENCE.findall(PAGE.read_text(encoding="utf-8")):
        for line in block.splitlines():
            if not re.match(r"%?pip install ", line.strip()):
                continue
            kind = ("clone" if "git clone" in block else "colab" if line.startswith("%pip")
                    else "package" if "git+" in line else "other")
            found[kind].append(line.strip())
    return found


def line_extras(line: str) -> set[str]:
    m = PAGE_EXTRAS.search(line.split(" #")[0])
    return set(m.group(1).split(",")) if m else set()


def test_the_page_gives_one_install_line_per_situation_and_each_names_real_extras():
    lines = page_install_lines()
    for kind in ("clone", "package", "colab"):
        assert len(lines[kind]) == 1, f"how-to-use.md should give one {kind} install line, not {lines[kind]}"
    defined = set(PYPROJECT["optional-dependencies"])
    for line in sum(lines.values(), []):
        assert line_extras(line) <= defined, f"{line}: no such extra in pyproject.toml"


def test_the_clone_and_package_lines_take_every_extra_a_notebook_asks_for():
    """One command, then every notebook runs: the lines' extras hold what each notebook's setup cell names."""
    defined = PYPROJECT["optional-dependencies"]
    asked = {e for p in executed_notebooks() + student_notebooks() for e in needed_extras(json.loads(p.read_text()))}
    assert asked >= {"llm", "triton"}, asked
    lines = page_install_lines()
    clone, package = line_extras(lines["clone"][0]), line_extras(lines["package"][0])
    assert clone == package, "the clone and the package lines install different extras"
    installed = {r for e in clone for r in defined[e]}
    for extra in sorted(asked):
        assert extra in clone or set(defined[extra]) <= installed, f"{lines['clone'][0]} leaves out {extra}"
    assert "lab" in clone and clone & {"cuda12", "cuda13"}, "JupyterLab and a CUDA extra belong in the line"
    assert lines["clone"][0].startswith('pip install -e ".['), "a clone installs editable, from where it is"


def test_the_package_and_colab_lines_install_the_release_the_notebooks_pin():
    lines = page_install_lines()
    extras = ",".join(sorted(line_extras(lines["package"][0])))
    assert lines["package"][0] == f'pip install "gpu-course[{extras}] @ git+{install.REPO_URL}@{release_tag()}"'
    colab = next(line.strip() for line in setup_cell().splitlines() if "%pip install" in line)
    assert lines["colab"] == [colab], "the page's Colab line is not the notebooks' first cell's"


def test_the_page_states_the_courses_facts_from_the_project():
    """Numbers and names the project holds come from it at build time (_ext/course_facts.py)."""
    text = PAGE.read_text(encoding="utf-8")
    for fact in ("chapters", "labs", "release", "python", "extras_by_part", "solutions_part"):
        assert "{{ " + fact + " }}" in text, f"how-to-use.md does not use {{{{ {fact} }}}}"
    assert not re.search(r"numbered 1 to \d|Python 3\.\d+ or newer", text), "a typed number the project holds"
    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        import course_facts
    finally:
        sys.path.remove(str(ROOT / "_ext"))
    facts = course_facts.facts(ROOT)
    assert facts["chapters"] == str(len(list((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))))
    assert facts["labs"] == str(len(student_notebooks()))
    assert facts["release"] == release_tag(PYPROJECT["version"])
    assert "| Part V. " in facts["extras_by_part"] and "`triton`" in facts["extras_by_part"]


# --------------------------------------------------------------------------- the release's tag
def git(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_the_release_the_notebooks_pin_is_a_tag_of_this_repository():
    """Every notebook's first cell installs release_tag() on Colab: `make tag` made it, and it is here."""
    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    if not git("tag", "--list").stdout.strip():  # a clone made without tags (a shallow CI checkout, say)
        pytest.skip("this clone has no tags at all: git fetch --tags")
    tag = release_tag(PYPROJECT["version"])
    found = git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
    assert found.returncode == 0, (f"the notebooks install {tag}, and this repository has no such tag: "
                                   f"`make tag` makes it, then `git push origin {tag}`")


def test_the_release_step_tags_head_once_with_pyprojects_version(tmp_path, monkeypatch):
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@localhost")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "gpu-course"\nversion = "9.8.7"\n\n'
                                         '[tool.other]\nversion = "0.0.1"\n')
    assert install.project_version(repo) == "9.8.7"
    assert install.project_version(ROOT) == PYPROJECT["version"]
    for args in (("init", "-q"), ("add", "-A"), ("-c", "commit.gpgsign=false", "commit", "-q", "-m", "one")):
        assert git(*args, cwd=repo).returncode == 0
    first = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text() + "# changed\n")
    said = install.tag_release(repo)
    assert said.startswith(f"Tagged {first[:12]} as v9.8.7.") and "git push origin v9.8.7" in said, said
    assert "Changes not committed are not in it." in said, said
    assert git("-c", "commit.gpgsign=false", "commit", "-qam", "two", cwd=repo).returncode == 0
    assert "exists" in install.tag_release(repo)
    assert git("rev-parse", "v9.8.7^{commit}", cwd=repo).stdout.strip() == first, "a release tag never moves"


# --------------------------------------------------------------------------- setup()'s advice
def test_setup_advises_the_install_line_that_fits_how_the_course_was_installed(monkeypatch, capsys):
    assert install.clone_root() == ROOT  # this checkout, installed editable
    assert install.install_line(["triton"]) == f'pip install -e "{ROOT}[triton]"'
    with monkeypatch.context() as m:
        m.setattr(install, "hosted", lambda: False)
        m.setattr(install, "driver_cuda_version", lambda: None)
        m.setattr(install, "requirements", lambda extras: ["triton>=3.4"])
        m.setattr(install, "unmet", lambda reqs: list(reqs))
        install._install_what_is_missing(["triton"], verbose=True)
    assert capsys.readouterr().out.strip() == \
        f'This notebook needs triton>=3.4, not installed here: pip install -e "{ROOT}[triton]"'

    class Dist:
        def __init__(self, direct):
            self.direct = direct

        def read_text(self, name):
            return json.dumps(self.direct) if self.direct is not None and name == "direct_url.json" else None

    monkeypatch.setattr(install, "clone_root", lambda: None)
    vcs = {"url": install.REPO_URL, "vcs_info": {"vcs": "git", "requested_revision": "v0.1.0", "commit_id": "ab"}}
    monkeypatch.setattr(install.metadata, "distribution", lambda name: Dist(vcs))  # as the first cell installs it
    assert install.install_line(["triton"]) == \
        f'pip install "gpu-course[triton] @ git+{install.REPO_URL}@v0.1.0"'
    monkeypatch.setattr(install.metadata, "distribution", lambda name: Dist(None))  # from an index or a wheel
    assert install.install_line(["llm", "lab"]) == 'pip install "gpu-course[llm,lab]"'


# --------------------------------------------------------------------------- a fresh Colab-like runtime
def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def colab_venv() -> Path:
    """A virtual environment with Colab's preinstalled packages, built once per set of versions."""
    key = hashlib.sha256(json.dumps([sys.version, COLAB]).encode()).hexdigest()[:12]
    cached = Path(tempfile.gettempdir()) / f"gpu-course-colab-{key}"
    if not (cached / "ready").exists():
        building = cached.with_name(cached.name + f".{os.getpid()}")
        shutil.rmtree(building, ignore_errors=True)
        run([sys.executable, "-m", "venv", building])
        run([building / "bin/python", "-m", "pip", "install", "-q", *COLAB], timeout=900)
        (building / "ready").touch()
        shutil.rmtree(cached, ignore_errors=True)
        building.rename(cached)
    return cached


def copy_working_tree(repo: Path) -> Path:
    """The files of this working tree that git tracks or would track, copied to ``repo``: a clone."""
    files = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT).stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    return repo


@pytest.fixture(scope="module")
def release_repo(tmp_path_factory) -> Path:
    """This working tree as a git repository with the release tag the cell asks for."""
    repo = copy_working_tree(tmp_path_factory.mktemp("release") / "gpu-course")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost", "-c", "commit.gpgsign=false"]
    run([*git, "init", "-q"], cwd=repo)
    run([*git, "add", "-A"], cwd=repo)
    run([*git, "commit", "-q", "-m", "release"], cwd=repo)
    run([*git, "tag", release_tag()], cwd=repo)
    return repo


def colab(colab_venv: Path, release_repo: Path, tmp_path: Path):
    """A copy of the Colab environment, a kernel spec for it, and the kernel's environment variables."""
    venv = tmp_path / "venv"
    shutil.copytree(colab_venv, venv, symlinks=True)
    spec = tmp_path / "kernels" / "colab"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(venv / "bin/python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python"}))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "NUMBA_ENABLE_CUDASIM", "VIRTUAL_ENV", "MPLBACKEND")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", COLAB_RELEASE_TAG="test",
               # pip's git clone of the course's repository gets this working tree instead
               GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0=f"url.{release_repo}.insteadOf",
               GIT_CONFIG_VALUE_0=install.REPO_URL)
    work = tmp_path / "work"  # not the checkout, so `import course` finds only what pip installed
    work.mkdir()
    return venv, spec.parent, env, work


def execute(cells: list[str], kernels: Path, env: dict, cwd: Path, dies: bool = False,
            kernel: str = "colab") -> list[str]:
    """Run cells in a fresh kernel of the Colab environment (or of the named ``kernel``); each cell's
    printed text.

    With ``dies`` the kernel must exit during the cells (a restart), and the text up to then is returned.
    """
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    km = AsyncKernelManager(kernel_name=kernel, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    client = NotebookClient(nb, km=km, timeout=900, resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute(env=env)
        assert not dies, "the kernel did not restart"
    except DeadKernelError:
        if not dies:
            raise
    return ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream") for c in nb.cells]


def test_colab_first_cell_then_the_first_lab_and_doctor(colab_venv, release_repo, tmp_path):
    venv, kernels, env, work = colab(colab_venv, release_repo, tmp_path)
    lab = json.loads((ROOT / "labs/first_kernel/solutions/first_kernel.ipynb").read_text())
    cells = ["".join(c["source"]) for c in lab["cells"] if c["cell_type"] == "code"]
    cells[0] = with_setup_cell(cells[0], [])
    cells.append("import numba.cuda\n"
                 "print(numba.cuda.__file__)\n"
                 "result = check(vector_add)\n"
                 "assert result.passed and len(result.cases) >= 7, result\n")
    out = execute(cells, kernels, env, work)
    assert "Mode: simulator" in out[0] and "Restarting" not in out[0], out[0]
    assert "numba_cuda" in out[-1], "numba-cuda was not switched on in the kernel that installed it"
    assert out[-1].count(" pass ") >= 7, out[-1]

    py = venv / "bin/python"
    source = json.loads(run([py, "-c", "from importlib import metadata; "
                                       "print(metadata.distribution('gpu-course').read_text('direct_url.json'))"],
                            env=env, cwd=work).stdout)
    assert source["url"] == install.REPO_URL and source["vcs_info"]["requested_revision"] == release_tag()
    versions = run([py, "-c", "import numpy, numba; print(numpy.__version__, numba.__version__)"],
                   env=env, cwd=work).stdout.split()
    assert versions == ["2.0.2", "0.60.0"], "the install replaced Colab's numpy or numba"
    doctor = subprocess.run([py, "-m", "autograder", "doctor"], capture_output=True, text=True, env=env, cwd=work)
    print(doctor.stdout)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    for line in ("Mode: simulator", "Driver: none found", "CuPy: cupy-cuda12x 13.3.0",
                 "numba-cuda: active", "Setup is fine."):
        assert line in doctor.stdout


def test_colab_restarts_once_when_numba_cuda_came_too_late(colab_venv, release_repo, tmp_path):
    """numba's own numba.cuda, imported before the course, cannot be swapped in place: one restart."""
    venv, kernels, env, work = colab(colab_venv, release_repo, tmp_path)
    cell = setup_cell()
    first = "import os\nos.environ['NUMBA_ENABLE_CUDASIM'] = '1'  # as setup() would\nimport numba.cuda"
    out = execute([first, cell], kernels, env, work, dies=True)
    assert "numba.cuda was imported before numba-cuda took effect" in out[1], out
    assert "Restarting the kernel once" in out[1], out
    out = execute([cell, "import numba.cuda\nprint(numba.cuda.__file__)"], kernels, env, work)
    assert "Mode: simulator" in out[0] and "numba_cuda" in out[1], out


def test_colab_gpu_runtime_gets_the_cuda_12_pieces_without_a_restart(colab_venv, release_repo, tmp_path):
    """Colab's GPU driver is CUDA 12.x: the cell adds numba-cuda's cu12 pieces beside the preinstalled
    cupy-cuda12x. No GPU here, so the kernel is told the driver's version; the kernels run simulated."""
    venv, kernels, env, work = colab(colab_venv, release_repo, tmp_path)
    told = "import course.install\ncourse.install.driver_cuda_version = lambda: 12040\nMODE = course.setup("
    cell = setup_cell().replace("MODE = course.setup(", told)
    out = execute([cell, "import numba.cuda\nprint(numba.cuda.__file__)"], kernels, env, work)
    assert "for the CUDA 12.4 driver: numba-cuda[cu12]" in out[0] and "no restart needed" in out[0], out[0]
    assert "numba_cuda" in out[1], out[1]
    pip = json.loads(run([venv / "bin/python", "-m", "pip", "list", "--format", "json"], env=env, cwd=work).stdout)
    versions = {p["name"].lower(): p["version"] for p in pip}
    assert versions["numpy"] == "2.0.2" and versions["numba"] == "0.60.0" and versions["cupy-cuda12x"] == "13.3.0"
    assert versions["cuda-bindings"].startswith("12.") and versions["cuda-toolkit"].startswith("12.")
    assert "cupy-cuda13x" not in versions


# --------------------------------------------------------------------------- a learner's machine without a GPU
@pytest.mark.heavy
def test_a_learner_without_a_gpu_runs_parts_v_and_vi_after_the_pages_one_install_line(tmp_path):
    """how-to-use.md's clone line, run as the page prints it in a clone and a fresh virtual environment
    on this machine, which has no GPU; then chapter 19 and Lab 24's student release, top to bottom, in
    a kernel of that environment. One constraint is added: torch at this environment's version, so
    that pip takes the CPU build this machine's index holds (as `make setup` does) and not the
    gigabytes of PyTorch's CUDA build."""
    from course.device import gpu_present

    if gpu_present():
        pytest.skip("this is the page's path for a machine without a GPU")
    torch = pytest.importorskip("torch")
    line = page_install_lines()["clone"][0]
    clone = copy_working_tree(tmp_path / "gpu-course")  # what `git clone` and `cd gpu-course` give
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"torch=={torch.__version__}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET", "MPLBACKEND")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv),
               PIP_CONSTRAINT=str(constraints))
    installed = subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True,
                               timeout=3000)
    assert installed.returncode == 0, f"{line}\n{installed.stdout[-3000:]}\n{installed.stderr[-3000:]}"

    spec = tmp_path / "kernels" / "learner"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(venv / "bin/python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "learner", "language": "python"}))
    for notebook in ("chapters/19_triton.ipynb", "labs/custom_ops/custom_ops.ipynb"):
        nb = json.loads((clone / notebook).read_text())
        cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        cells.append("import course\nprint(course.__file__)")
        out = execute(cells, spec.parent, env, (clone / notebook).parent, kernel="learner")
        assert "Mode: simulator" in out[0] and "Triton's interpreter" in out[0], f"{notebook}: {out[0]}"
        assert "not installed here" not in out[0], f"{notebook}: {out[0]}"
        assert out[-1].startswith(str(clone / "course")), f"{notebook} ran another course: {out[-1]}"
