# Two commands do everything on a fresh machine (Python 3.10+):
#   make repro   the main job: the bug reproduction on the shipped model
#   make test    every test: unit tests, then pytest --nbval over all notebooks
# Both create .venv on first use. Without a GPU, torch's CPU build is installed (never a CUDA download).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH_VERSION   ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# The notebooks' recorded outputs are the CPU run's (emulated graphs, fp32). On a GPU the same cells
# print other text in places (backend names, bf16 accuracies), so there nbval runs every cell and
# every assert (--nbval-lax) without comparing outputs; notebooks/gpu/ holds the H200's outputs.
NBVAL ?= $(shell if nvidia-smi -L >/dev/null 2>&1; then echo --nbval-lax; else echo --nbval; fi)

.PHONY: repro test unit nbval figures notebooks bench-kernels clean-venv

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "GPU found: installing torch with CUDA"; \
		$(PY) -m pip install -q "torch>=2.4"; \
	else \
		echo "no GPU: installing torch $(TORCH_VERSION) (CPU build)"; \
		if $(PY) -m pip install -q --no-index --no-deps "torch==$(TORCH_VERSION)" 2>/dev/null; then \
			$(PY) -m pip install -q "torch==$(TORCH_VERSION)"; \
		else \
			$(PY) -m pip install -q "torch==$(TORCH_VERSION)" --extra-index-url $(TORCH_CPU_INDEX); \
		fi; \
	fi
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

repro: $(VENV)/.ready
	$(PY) -m mla_edu.repro

test: $(VENV)/.ready
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q $(NBVAL) notebooks/*.ipynb

unit: $(VENV)/.ready
	$(PY) -m pytest -q tests

nbval: $(VENV)/.ready
	$(PY) -m pytest -q $(NBVAL) notebooks/*.ipynb

# Regenerate every figure in figures/ (deterministic).
figures: $(VENV)/.ready
	$(PY) -m mla_edu.figures

# Re-execute every notebook in place (after editing the paired .py files).
notebooks: $(VENV)/.ready
	$(VENV)/bin/jupytext --sync notebooks/*.py
	for nb in notebooks/*.ipynb; do $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace $$nb || exit 1; done

clean-venv:
	rm -rf $(VENV)
