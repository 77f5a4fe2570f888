# Two commands do everything on a fresh machine (Linux or macOS on Apple silicon, Python 3.11; Windows: WSL2,
# or the PowerShell commands of docs/setup.md):
#   make repro   the main job: the bug reproduction on the shipped model
#   make test    every test: ruff, the unit tests, then pytest --nbval over all notebooks
# Both create .venv on first use with the exact versions of the lock: requirements/cpu.txt without a GPU
# (torch's CPU build, never a CUDA download), requirements/gpu.txt with one, requirements/macos-arm64.txt on an
# Apple-silicon Mac.
# More: make test-lab (JupyterLab in headless Chromium), make test-gpu (the whole suite on a GPU machine with
# its own Python, from carried wheels: make gpu-wheels), make book (static HTML site), make slides (a
# reveal.js deck per workshop track and per notebook), make instructor (the notebooks and book with solutions), make test-kernel-lab (the
# kernel lab's tests: kernel_lab/README.md), make test-latest
# (the tests against the newest release of every dependency), make lock (refresh the locks), make
# test-no-triton (the tests without Triton, as on a Mac), make check-platforms (the macOS and Windows locks
# install there).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
HAS_GPU := $(shell if nvidia-smi -L >/dev/null 2>&1; then echo 1; fi)
# The lock by platform: Linux (and WSL2) by GPU, macOS on Apple silicon its own. PyTorch publishes no torch 2.13
# for Intel Macs, and make on Windows is not supported: docs/setup.md says what to use there.
OS_ARCH := $(shell uname -s)-$(shell uname -m)
ifeq ($(OS_ARCH),Darwin-arm64)
LOCK   := requirements/macos-arm64.txt
else ifeq ($(OS_ARCH),Darwin-x86_64)
$(error Intel Mac: torch 2.13 has no wheel for it (the last is 2.2.2); docs/setup.md says what to use instead)
else ifneq ($(filter Linux-%,$(OS_ARCH)),)
LOCK   := requirements/$(if $(HAS_GPU),gpu,cpu).txt
else
$(error $(OS_ARCH): no lock for this platform; docs/setup.md lists the supported ones (Windows: WSL2 or PowerShell))
endif
TORCH_PIN := $(shell grep -E '^torch==' $(LOCK))
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
PIP    := -m pip install -q --disable-pip-version-check
# The venvs are filled by uv (pinned below, in its own small venv .venv-uv): the same lock as pip would install, in
# about 10 s where pip took 2 minutes here. uv reads no pip.conf (an index mirror goes in UV_INDEX_URL or uv.toml):
# the wheel folders and URLs named in PIP_FIND_LINKS (where torch's CPU build may lie on disk) are passed on, those
# that exist. A make with .venv made and no uv builds none.
UV_VERSION := 0.13.9
UV := .venv-uv/bin/uv
UV_STAMP := .venv-uv/.uv-$(UV_VERSION)
INSTALL = $(UV) pip install -q --python $(1) \
	$(foreach d,$(PIP_FIND_LINKS),$(if $(or $(findstring ://,$(d)),$(wildcard $(d))),--find-links $(d)))
# The notebooks' recorded outputs are the CPU run's (emulated graphs, fp32). On a GPU the same cells
# print other text in places (backend names, bf16 accuracies), so there nbval runs every cell and
# every assert (--nbval-lax) without comparing outputs; notebooks/gpu/ holds a Hopper GPU's outputs. Without Triton (a Mac,
# Windows) a Triton cell prints one line saying so before its stored output: the sanitizer drops that line.
NBVAL ?= $(if $(HAS_GPU),--nbval-lax,--nbval --nbval-sanitize-with notebooks/without_triton.cfg)
# The tests on every core of a CPU machine (pytest-xdist; a notebook's cells stay together, in order, on one
# worker). On a GPU machine one process, so that the tests do not share the GPU.
XDIST ?= $(if $(HAS_GPU),,-n auto --dist loadscope)

.PHONY: repro test lint unit nbval test-gpu gpu-wheels test-lab test-kernel-lab book slides instructor attendee test-latest \
	test-no-triton no-triton-repro no-triton-tests no-triton-venv check-platforms lock figures notebooks clean-venv

# torch first, on its own: a CPU machine takes the CPU build from a local wheel where one lies on disk
# (PIP_FIND_LINKS), else from PyTorch's CPU index. Then exactly the lock, then this package without deps.
$(VENV)/.ready: pyproject.toml $(LOCK)
	@test -f $(UV_STAMP) || $(MAKE) --no-print-directory $(UV_STAMP)
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
ifeq ($(HAS_GPU),1)
	@echo "GPU found: installing $(LOCK) (torch's CUDA build)"
else
	@echo "no GPU: installing $(LOCK) ($(TORCH_PIN), CPU build)"
	$(call INSTALL,$(PY)) --no-deps "$(TORCH_PIN)" 2>/dev/null || \
		$(call INSTALL,$(PY)) --no-deps "$(TORCH_PIN)" --index-url $(TORCH_CPU_INDEX)
endif
	$(call INSTALL,$(PY)) -r $(LOCK)
	$(call INSTALL,$(PY)) --no-deps -e .
	$(PY) -m pip check
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

repro: $(VENV)/.ready
	$(PY) -m mla_edu.case_study.repro

# The unit tests also write $(TRITON_RECORD): which tests ask whether Triton is here (tests/triton_record.py); the
# run without Triton reads it.
TRITON_RECORD := build/triton_record.json
test: $(VENV)/.ready lint
	$(PY) -m pytest -q $(XDIST) --triton-record $(TRITON_RECORD) tests
	$(PY) -m pytest -q $(XDIST) $(NBVAL) notebooks/*.ipynb

# ruff (pyproject.toml's [tool.ruff]) over the library, tools, tests and the notebooks' .py sources.
lint: $(VENV)/.ready
	$(VENV)/bin/ruff check mla_edu tools tests kernel_lab notebooks/*.py

unit: $(VENV)/.ready
	$(PY) -m pytest -q $(XDIST) --triton-record $(TRITON_RECORD) tests

nbval: $(VENV)/.ready
	$(PY) -m pytest -q $(XDIST) $(NBVAL) notebooks/*.ipynb

# The whole suite on a GPU machine that has its own Python with torch and triton and no network (the H200): the
# lock's test stack from wheels in .whl/ (make gpu-wheels, run where pip works), installed into /tmp/site, then every
# unit test and every notebook (--nbval-lax), each part in ONE pytest process, and results/gpu_suite_h200.md
# (tools/gpu_suite.py). GPU_PARTS=unit or nbval runs one part (a machine that limits a command's time); COMMIT names
# the commit in the report where the copy has no .git.
GPU_PY ?= python3
GPU_PARTS ?= unit nbval
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
test-gpu:
	COMMIT=$(COMMIT) $(GPU_PY) -m tools.gpu_suite run $(GPU_PARTS)

gpu-wheels:
	$(PYTHON) -m tools.gpu_suite wheels

# JupyterLab from .venv on 127.0.0.1, driven by headless Chromium: Run All in every notebook, the panel's
# run button in notebook 08, and the book's pages. Installs Debian's chromium + chromium-driver if missing.
# On up to LAB_WORKERS cores (pytest-xdist), each worker with its own JupyterLab and Chromium: one Run All leaves a
# core mostly idle, so two side by side finish sooner (CI's step: 416 s against 462, results/ci_fresh_clone.md).
# LAB_WORKERS=1 runs them one at a time, as an attendee does: only such a run writes their times
# (build/lab_run_all_seconds.json, for tools/notebook_timings.py).
LAB_WORKERS ?= 2
test-lab: $(VENV)/.ready book slides
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver)
	$(PY) -m pytest -q -m lab $(if $(filter 1,$(LAB_WORKERS)),,-n auto --maxprocesses $(LAB_WORKERS) --dist load) tests/lab

# The kernel lab's tests (kernel_lab/README.md), not part of make test: the essay's numbers and the A/B results'
# readings recomputed from their files, the variant patches applied to the seesaw kernel and compiled for sm_90a.
test-kernel-lab: $(VENV)/.ready
	$(PY) -m pytest -q $(XDIST) kernel_lab/tests

# A static HTML site of the executed notebooks (Sphinx + MyST-NB; the stored outputs, nothing re-run).
book: $(VENV)/.ready
	$(VENV)/bin/sphinx-build -q -W --keep-going -b html docs build/book

# The instructor's copies: every notebook with its solutions (instructor/solutions/, instructor/ex08.py) in
# build/instructor/notebooks/, and the book built from them in build/instructor/book/. The learner's notebooks,
# book and package carry no solution.
instructor: $(VENV)/.ready
	$(PY) -m tools.instructor

# The attendees' copy: the committed repository without instructor/ (the solutions), as build/mla-edu-attendee.tar.gz,
# and without the test modules that read them (each calls tests/solutions.py's require_solutions(), and holds reference
# answers and near misses of its own); everything else runs as in a clone.
ATTENDEE ?= build/mla-edu-attendee.tar.gz
attendee:
	@mkdir -p $(dir $(ATTENDEE))
	git archive -o $(ATTENDEE) --prefix=mla-edu/ HEAD ':(exclude)instructor' ':(exclude)tests/solutions.py' \
		$$(git grep -l '^require_solutions()' HEAD -- tests | sed 's/^HEAD:/:(exclude)/')
	@echo "$(ATTENDEE): HEAD ($$(git rev-parse --short HEAD)) without instructor/"

# A reveal.js deck per workshop track and per notebook, from the slide files docs/slides/*.yaml, in build/book/slides/
# (linked from the book's instructor pages). reveal.js and MathJax: exact versions from the npm registry, checked
# against their sha512 (tools/slides.py), fetched once into build/npm/; the decks then open offline.
slides: $(VENV)/.ready
	@command -v npm >/dev/null || command -v apt-get >/dev/null || \
		{ echo 'make slides needs npm, once, to fetch reveal.js and MathJax: install Node.js (macOS: brew install node; Windows: winget install OpenJS.NodeJS)'; exit 1; }
	@command -v npm >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm)
	$(PY) -m tools.slides

# The same tests in a separate environment with the newest release of every dependency that
# pyproject.toml allows (torch: the newest CPU build reachable). Run it before refreshing the lock.
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python $(PIP) --upgrade pip
ifeq ($(HAS_GPU),1)
	$(LATEST)/bin/python $(PIP) torch
else
	$(LATEST)/bin/python $(PIP) --retries 0 --timeout 20 --index-url $(TORCH_CPU_INDEX) torch
endif
	$(LATEST)/bin/python $(PIP) --upgrade --upgrade-strategy eager -e ".[dev,lab,book]" \
		"torch==$$($(LATEST)/bin/python -c 'import torch; print(torch.__version__)')"
	$(LATEST)/bin/python -m pip check
	$(LATEST)/bin/python -m pip list --format=freeze | grep -i -E '^(torch|triton|transformers|numpy|matplotlib|jupyterlab|nbval)=='
	$(LATEST)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	MLA_EDU_UNLOCKED=1 $(LATEST)/bin/python -m pytest -q tests
	MLA_EDU_UNLOCKED=1 $(LATEST)/bin/python -m pytest -q $(NBVAL) notebooks/*.ipynb

# The tests as on a laptop without Triton (macOS, Windows): a venv from the Linux CPU lock less Triton, then the
# main job (its tables must be results/repro_cpu.md's: no-triton-repro), the unit tests (those that need Triton skip
# themselves; the tests that, in make test's green run of this tree, never asked whether Triton is here are left
# out: they run the same code, tests/triton_record.py; TRITON_RECORD=none runs them all) and strict nbval over every
# notebook (no-triton-tests). .ci/run runs the two parts apart: the main job (one thread) while the browser tests run,
# the tests after them.
NO_TRITON := .venv-no-triton
test-no-triton: no-triton-repro no-triton-tests

no-triton-repro: $(NO_TRITON)/.ready
	$(NO_TRITON)/bin/python -c "import mla_edu.kernels, mla_edu.serving"
	$(NO_TRITON)/bin/python -m mla_edu.case_study.repro > $(NO_TRITON)/repro.md
	$(NO_TRITON)/bin/python -m tools.same_repro_table results/repro_cpu.md $(NO_TRITON)/repro.md

no-triton-tests: $(NO_TRITON)/.ready
	$(NO_TRITON)/bin/python -m pytest -q -n auto --dist loadscope --triton-skip-unasked $(TRITON_RECORD) tests
	$(NO_TRITON)/bin/python -m pytest -q -n auto --dist loadscope --nbval --nbval-sanitize-with notebooks/without_triton.cfg notebooks/*.ipynb

# The venv of test-no-triton, made again when the lock or pyproject.toml changes (.ci/run makes it while the
# browser tests run).
no-triton-venv: $(NO_TRITON)/.ready
$(NO_TRITON)/.ready: pyproject.toml requirements/cpu.txt
	@test -f $(UV_STAMP) || $(MAKE) --no-print-directory $(UV_STAMP)
	rm -rf $(NO_TRITON)
	$(PYTHON) -m venv $(NO_TRITON)
	grep -v -E '^triton==' requirements/cpu.txt > $(NO_TRITON)/lock.txt
	$(call INSTALL,$(NO_TRITON)/bin/python) --no-deps "$$(grep -E '^torch==' requirements/cpu.txt)" 2>/dev/null || \
		$(call INSTALL,$(NO_TRITON)/bin/python) --no-deps "$$(grep -E '^torch==' requirements/cpu.txt)" \
		--index-url $(TORCH_CPU_INDEX)
	$(call INSTALL,$(NO_TRITON)/bin/python) -r $(NO_TRITON)/lock.txt
	$(call INSTALL,$(NO_TRITON)/bin/python) --no-deps -e .
	! $(NO_TRITON)/bin/python -m pip check | grep -v 'mla-edu [0-9.]* requires triton, which is not installed'
	! $(NO_TRITON)/bin/python -c "import triton" 2>/dev/null
	$(NO_TRITON)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# Every package of the macOS (Apple silicon) and Windows locks, and this package, has a wheel there (pip
# install --dry-run --only-binary=:all: --platform), the locks resolve there with that platform's markers
# (uv), and an Intel Mac's newest torch is older than the lock's. Needs the network.
check-platforms: $(UV_STAMP)
	$(PYTHON) -m tools.check_platforms --uv $(UV)

# Refresh the locks with uv's resolver, for Python 3.11: cpu.txt and gpu.txt for Linux x86_64, macos-arm64.txt
# for Apple silicon and windows-amd64.txt for Windows (PyPI's torch there: the CPU build; no Triton), then run
# make test-latest and make test. The macOS and Windows locks start from the Linux CPU lock (uv keeps an output
# file's versions where it can), so all locks pin the same versions of what they share (tests/test_packaging.py).
# No lock for Intel Macs: PyTorch publishes no torch 2.13 for them. uv lives in its own small venv, so that this
# works before .venv exists.
LOCK_ARGS = pyproject.toml --extra dev --extra lab --extra book --python-version 3.11 --no-config \
	--custom-compile-command "make lock"
LAPTOP_LOCKS := macos-arm64:aarch64-apple-darwin windows-amd64:x86_64-pc-windows-msvc
lock: $(UV_STAMP)
	$(UV) pip compile $(LOCK_ARGS) --python-platform x86_64-manylinux_2_28 requirements/cpu.in \
		-o requirements/cpu.txt $$(ls /opt/wheels/torch-*+cpu-*.whl >/dev/null 2>&1 && echo --find-links /opt/wheels || \
		   echo --extra-index-url $(TORCH_CPU_INDEX) --index-strategy unsafe-best-match)
	$(UV) pip compile $(LOCK_ARGS) --python-platform x86_64-manylinux_2_28 requirements/gpu.in -o requirements/gpu.txt
	for lock in $(LAPTOP_LOCKS); do \
		cp requirements/cpu.txt requirements/$${lock%%:*}.txt && \
		MACOSX_DEPLOYMENT_TARGET=14.0 $(UV) pip compile $(LOCK_ARGS) --python-platform $${lock#*:} \
			requirements/laptop.in -o requirements/$${lock%%:*}.txt || exit 1; \
	done

# Regenerate every figure in figures/ (deterministic).
figures: $(VENV)/.ready
	$(PY) -m tools.figures

# Re-execute every notebook in place (after editing the paired .py files), then rewrite the timings table.
notebooks: $(VENV)/.ready
	$(VENV)/bin/jupytext --sync notebooks/*.py
	$(PY) -m tools.run_notebooks --out notebooks  # nbclient with sliced polls: nbconvert can hang on 08's widgets
	$(PY) -m tools.notebook_timings  # the instructor guide's table, from the notebooks just executed
	$(PY) -m tools.run_notebooks --out notebooks 00_setup_check.ipynb  # prints that table

# uv in a venv of its own (pip installs it: one wheel), made by the first target that needs it, again when
# UV_VERSION changes. Built aside and moved into place, so that two makes building it at once cannot break it.
$(UV_STAMP):
	rm -rf .venv-uv.tmp.$$$$ && $(PYTHON) -m venv .venv-uv.tmp.$$$$ && \
		.venv-uv.tmp.$$$$/bin/python $(PIP) "uv==$(UV_VERSION)" && touch .venv-uv.tmp.$$$$/.uv-$(UV_VERSION) && \
		rm -rf .venv-uv && mv .venv-uv.tmp.$$$$ .venv-uv || (rm -rf .venv-uv.tmp.$$$$; exit 1)

clean-venv:
	rm -rf $(VENV) $(LATEST) .venv-uv
