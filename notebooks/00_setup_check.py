# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Setup check
#
# **Run this first**, before the workshop (Run All). It checks that this machine can run every
# notebook: the kernel, the installed packages against the lock, Triton, the widgets of notebook 08's
# panel, the shipped model's checksum, and a smoke run of the real stack. Each check ends green, green
# with a note, or red with the one thing to do. The last cell says all green, or which check is red.
# Then it says how long each notebook should take here.
#
# **You need** the project's environment (`make test` once, or `make .venv/.ready`; per system:
# `docs/setup.md`) and a minute: the cells run in seconds (the table at the end says how long here).

# %%
import sys

try:
    import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 when there is no GPU)
    from mla_edu.workshop import setup_check as sc
except ModuleNotFoundError as e:  # the one failure no check can report: the package itself is not there
    if (e.name or "").split(".")[0] not in ("mla_edu", "torch"):
        raise
    raise RuntimeError(
        f"wrong kernel: {sys.executable} cannot import {e.name}, so this notebook is not running the project's "
        "environment. Start JupyterLab from the project with .venv/bin/jupyter lab (Windows: "
        ".venv\\Scripts\\jupyter lab), or pick .venv's Python as the kernel (docs/setup.md)") from None

report = sc.Report()  # every check is registered before it runs: one that raises counts as red

# %% [markdown]
# ## 1. The kernel (core)
#
# The notebook has to run the project's Python: the one in `.venv`, with this checkout's `mla_edu`.
# A notebook opened in another Jupyter (Anaconda's, an editor's default interpreter) runs another
# Python; the cell above stops such a kernel at once, and this check catches one that imports
# `mla_edu` from another checkout or is another Python version than the lock's (3.11).

# %%
# NBVAL_IGNORE_OUTPUT
report.run("kernel", sc.check_kernel)

# %% [markdown]
# ## 2. Versions against the lock (core)
#
# `make` installs exactly the versions of this system's lock (`requirements/cpu.txt` on Linux without a
# GPU, `gpu.txt` with one, `macos-arm64.txt` on Apple silicon, `windows-amd64.txt` on Windows). The check
# compares the packages the notebooks import (this package's requirements and theirs), not the test and
# book tools. A package at another version is the first suspect when a notebook prints other numbers;
# the remedy names each one with its version.

# %%
# NBVAL_IGNORE_OUTPUT
report.run("versions", sc.check_versions)

# %% [markdown]
# ## 3. Triton (core)
#
# Triton publishes wheels for Linux only. Where it is installed, its kernels run in Triton's CPU
# interpreter without a GPU (`TRITON_INTERPRET=1`, which `import mla_edu` sets before anything imports
# `triton`), and a small Triton kernel (SGLang's page-table fill) has to give the same table as the
# torch version of it. Where it is not (macOS, Windows), the check passes with a note: every notebook
# runs the torch kernel instead.

# %%
# NBVAL_IGNORE_OUTPUT
report.run("triton", sc.check_triton)

# %% [markdown]
# ## 4. Widgets (core)
#
# Notebook 08's panel is made of widgets (`ipywidgets` in the kernel, `jupyterlab_widgets` in
# JupyterLab). One widget with a small figure is displayed below and its content read back. If
# JupyterLab draws no box with a line in it, the panel will not draw either.

# %%
# NBVAL_IGNORE_OUTPUT
report.run("widgets", sc.check_widgets)

# %% [markdown]
# ## 5. The shipped model (core)
#
# The tiny model's weights and config are checked against the sha256 digests in their manifest
# (`mla_edu/model/weights/manifest.json`); `load_pretrained` refuses weights that do not match.

# %%
report.run("weights", sc.check_weights)

# %% [markdown]
# ## 6. A smoke run (core)
#
# The whole stack for a few seconds: the shipped model answers 8 questions through the mini serving
# engine with CUDA graphs (emulated here), with the pre-fix cutlass_mla backend and with SGLang's fix.
# The bug of notebook 06 shows at once: the fixed backend answers every question, the pre-fix one
# almost none.

# %%
import torch  # noqa: E402

torch.set_num_threads(1)  # the same numbers on every CPU
smoke = {}
report.run("smoke run", sc.check_smoke, smoke)

# %%
# NBVAL_IGNORE_OUTPUT
print(f"smoke run: {smoke['seconds']:.1f} s on {smoke['device']}" if smoke else "no smoke run")

# %% [markdown]
# ## 7. How long each notebook takes here (core)
#
# `results/notebook_timings.json` holds each notebook's Run All time on the project's 2-core CPU machine
# and that machine's time for the smoke run above (`python -m tools.notebook_timings` writes it); scaled
# by this machine's smoke run, they give the wait to expect here. Reading and discussion come on top:
# see the instructor guide (`docs/instructor.md`).

# %%
# NBVAL_IGNORE_OUTPUT
report.run("timings", sc.check_timings, smoke.get("seconds"))

# %% [markdown]
# ## Summary (core)
#
# First the notes of checks that passed with one (Triton on macOS or Windows), then every red check
# with its remedy, then one line.

# %%
# NBVAL_IGNORE_OUTPUT
print("\n".join(report.notes()) or "no notes")

# %%
for line in report.remedies():
    print(line)
print(report.summary())
assert not report.red, f"red checks: {report.red}"
