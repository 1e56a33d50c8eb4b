"""Wheels for GPU nodes with no internet, built on a machine that has it.

``autograder wheelhouse`` resolves the course's dependencies for the node's Python
and platform and downloads the wheels the node lacks. Given the node's
``pip freeze`` (``--node-freeze``), packages the node already has at an acceptable
version are left out, which keeps the wheelhouse small; a node version the course
cannot use (numpy 2.5 with numba-cuda 0.30, say) is replaced. On the node:
``pip install --no-index --find-links WHEELHOUSE gpu-course[EXTRAS]``.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .notebooks import ROOT

DIST = "gpu-course"


def platform_tags(platform: str) -> list[str]:
    """pip matches --platform exactly: a manylinux_2_N target also accepts older glibc tags."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    n, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{k}_{arch}" for k in range(n, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for k, name in legacy.items() if k <= n]
    return tags


def requirements(extras: list[str]) -> list[str]:
    """The course's requirements with the chosen extras, from the installed package's metadata."""
    reqs = set()
    for line in metadata.requires(DIST) or []:
        req = Requirement(line)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in [*extras, ""]):
            continue
        req.marker = None
        reqs.add(str(req))
    return sorted(reqs)


def node_versions(freeze: Path | None) -> dict[str, str]:
    found = {}
    if freeze:
        for line in Path(freeze).read_text().splitlines():
            if "==" in line and not line.startswith("#"):
                name, ver = line.split("==", 1)
                found[canonicalize_name(name.split("[")[0].strip())] = ver.strip()
    return found


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def build(out: Path, python: str, platform: str, extras: list[str], freeze: Path | None) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    have = node_versions(freeze)
    reqs = requirements(extras)
    direct = {canonicalize_name(Requirement(r).name): Requirement(r) for r in reqs}
    # Prefer what the node has, unless the course's own pins exclude it.
    constraints = [f"{n}=={v}" for n, v in have.items()
                   if n not in direct or direct[n].specifier.contains(v, prereleases=True)]
    target = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
              *[a for t in platform_tags(platform) for a in ("--platform", t)], "--platform", "any"]
    with tempfile.TemporaryDirectory() as tmp:
        req_file, con_file, report = Path(tmp, "req.txt"), Path(tmp, "con.txt"), Path(tmp, "report.json")
        req_file.write_text("\n".join(reqs) + "\n")
        con_file.write_text("\n".join(constraints) + "\n")
        r = _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                  "--target", str(Path(tmp, "t")), *target, "-r", str(req_file), "-c", str(con_file)])
        if r.returncode != 0:
            raise RuntimeError("pip could not resolve the requirements for the node:\n" + r.stderr[-3000:])
        resolved = [(i["metadata"]["name"], i["metadata"]["version"]) for i in json.loads(report.read_text())["install"]]
    missing = [(n, v) for n, v in resolved if have.get(canonicalize_name(n)) != v]
    for name, version in missing:
        r = _pip(["download", "--no-deps", "--quiet", "-d", str(out), *target, f"{name}=={version}"])
        if r.returncode != 0:
            raise RuntimeError(f"could not download {name}=={version}:\n{r.stderr[-2000:]}")
    r = _pip(["wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)])
    if r.returncode != 0:
        raise RuntimeError("could not build the course wheel:\n" + r.stderr[-2000:])
    return [f"{n}=={v}" for n, v in missing] + [DIST]
