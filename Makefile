# One entry point for every task. `make site` and `make test` are all a newcomer needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch on CPU-only machines; on a GPU machine use `make TORCH=torch setup`.
TORCH  ?= torch==2.13.0

.PHONY: setup site serve test gpu-test gpu-notebooks release tag freshness doctor wheelhouse clean

setup: $(VENV)/.installed

# The system's packages (Chromium, bubblewrap) install beside pip's, in one shell: on a clean machine
# both wait mostly on downloads. pip compiles on one core; compileall on all of them. A sandboxed
# runner cannot write .pyc files, so they must exist before the first grading. Some packages ship
# files that do not compile (pip skips those too): their errors are not ours.
$(VENV)/.installed: pyproject.toml
	@{ bash .ci/install-browser; bash .ci/install-sandbox; } & system=$$!; \
	$(PYTHON) -m venv $(VENV) && \
	$(BIN)/python -m pip install -q --upgrade pip && \
	$(BIN)/python -m pip install -q --no-compile "$(TORCH)" && \
	$(BIN)/python -m pip install -q --no-compile -e ".[dev]" && \
	{ $(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1; true; }; \
	pip=$$?; wait $$system; exit $$pip
	touch $@

site: setup
	$(BIN)/jupyter-book build . -W --keep-going
	@echo
	@echo "Site built. Open _build/html/index.html in a browser, or serve it with:"
	@echo "  $(BIN)/python -m http.server --directory _build/html 8000   (then visit http://localhost:8000)"

serve: site
	$(BIN)/python -m http.server --directory _build/html 8000

# CPU: every notebook top to bottom in the CUDA simulator (%%gpu cells skip themselves), the
# autograder bank, the site build with -W, the freshness check and the headless-browser check.
# Three workers on two cores (much of a test waits on a subprocess; a file that shares a graded
# bank runs on one of them), then alone the tests that watch the whole machine. Each phase prints
# its own summary; `make test` fails if either fails.
test: setup
	$(BIN)/python -m pytest -p no:randomly -q -n 3 -m "not whole_machine and not heavy"
	$(BIN)/python -m pytest -p no:randomly -q -m "whole_machine and not heavy" \
		$$($(BIN)/python -c 'import conftest; print(*conftest.WHOLE_MACHINE_FILES)')

# On a GPU machine: every notebook with 15 GB of GPU memory free, and the GPU-only tests; no site or browser.
gpu-test:  # also: .ci/gpu-suite WHEELHOUSE on an offline node
	$(PYTHON) -m pytest -m "not browser and not site" -q -rA

# On a GPU machine: re-execute the site's notebooks and stamp them (then commit them).
gpu-notebooks:
	$(PYTHON) -m autograder execute

release: setup
	$(BIN)/autograder release

# A release of the course: set pyproject.toml's version, `make release`, commit, then `make tag`.
# It tags HEAD "v" + that version, the tag every notebook's first cell installs on Colab
# (course.install.release_tag); then `git push origin` the tag. A tag that exists stays where it is.
tag:
	$(PYTHON) -m course.install tag

freshness: setup
	$(BIN)/autograder freshness

doctor: setup
	$(BIN)/autograder doctor

# Wheels for an offline GPU node (Python 3.12, x86-64 Linux); NODE_FREEZE=its `pip freeze`.
wheelhouse: setup
	$(BIN)/autograder wheelhouse --python 3.12 --platform manylinux_2_28_x86_64 --extras test \
	  $(if $(NODE_FREEZE),--node-freeze $(NODE_FREEZE)) --out wheelhouse

clean:
	rm -rf _build $(VENV)

# Slurm: a one-node cluster on this machine (as root; installs slurm-wlm and munge), and its tests.
.PHONY: slurm-local slurm-test
slurm-local:
	bash autograder/slurm/local-cluster.sh

slurm-test: setup
	$(BIN)/python -m pytest -p no:randomly -q tests/test_slurm.py
