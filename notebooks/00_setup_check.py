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
# notebook: the installed packages against the lock, the device, Triton's CPU interpreter, the shipped
# model's checksum, and a smoke run of the real stack. It ends with one line: all green, or which
# check is red and what to do. Then it says how long each notebook should take here.
#
# **You need** the project's environment (`make test` once, or `make .venv/.ready`) and about half a
# minute.

# %%
import os
import platform

import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 when there is no GPU)
from mla_edu.workshop import setup_check as sc

checks = {}  # check -> (passed, what to do if not)

# %% [markdown]
# ## 1. Versions against the lock (core)
#
# `make` installs exactly the versions of `requirements/cpu.txt` (no GPU) or `requirements/gpu.txt`.
# A package at another version is the first suspect when a notebook prints other numbers.

# %%
# NBVAL_IGNORE_OUTPUT
import triton  # noqa: E402  (after mla_edu, which set the interpreter up)

lock = sc.lock_path()
mismatches = sc.lock_mismatches(lock) if sc.locked() else []  # make test-latest: the newest versions, on purpose
print(f"Python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}")
print(f"lock {lock.relative_to(lock.parents[1])}: {len(sc.read_lock(lock))} packages pinned, "
      + (f"{len(mismatches)} not at their pinned version" if sc.locked() else "not compared (make test-latest)"))
for name, want, have in mismatches[:10]:
    print(f"  {name}: locked {want}, installed {have or 'missing'}")
checks["versions"] = (not mismatches, f"reinstall from {lock.name}: make clean-venv && make .venv/.ready")

# %% [markdown]
# ## 2. Device and Triton interpreter (core)
#
# Without a GPU the notebooks run on the CPU: CUDA graphs through `mla_edu.graphs`' emulator and every
# Triton kernel in Triton's interpreter, which must be switched on (`TRITON_INTERPRET=1`) before
# `triton` is imported; `import mla_edu` does it. A small Triton kernel (SGLang's page-table fill) then
# has to give the same table as the torch version of it.

# %%
# NBVAL_IGNORE_OUTPUT
from mla_edu.kvcache import fill_page_table  # noqa: E402
from mla_edu.kvcache.plots import page_table_scenario  # noqa: E402

device = mla_edu.default_device()
interpreter = os.environ.get("TRITON_INTERPRET") == "1"
print(f"device: {device}" + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else ""))
print(f"Triton: {'interpreter (CPU)' if interpreter else 'compiled for the GPU'}")
scenario = page_table_scenario()
tables = {}
for impl in ("torch", "triton"):
    table = torch.full_like(scenario["buf"][:4], -1, device=device)
    fill_page_table(scenario["req_to_token"].to(device), scenario["req_pool_indices"].to(device),
                    scenario["seq_lens"].to(device), table, scenario["page_size"], impl=impl)
    tables[impl] = table.cpu()
print("Triton's page-table fill equals torch's:", torch.equal(tables["torch"], tables["triton"]))
checks["device"] = (device.type == "cuda" or interpreter,
                    "without a GPU, import mla_edu before anything imports triton (it sets TRITON_INTERPRET=1)")
checks["triton"] = (torch.equal(tables["torch"], tables["triton"]),
                    "Triton's kernel disagrees with torch: check the triton version against the lock")

# %% [markdown]
# ## 3. The shipped model (core)
#
# The tiny model's weights and config are checked against the sha256 digests in their manifest
# (`mla_edu/model/weights/manifest.json`); `load_pretrained` refuses weights that do not match.

# %%
ok, digest = sc.weights_ok()
print("weights and config match the manifest:", ok)
print("sha256", digest)
checks["weights"] = (ok, "restore mla_edu/model/weights/ from git (git checkout -- mla_edu/model/weights)")

# %% [markdown]
# ## 4. A smoke run (core)
#
# The whole stack for a few seconds: the shipped model answers 8 questions through the mini serving
# engine with CUDA graphs (emulated here), with the pre-fix cutlass_mla backend and with SGLang's fix.
# The bug of notebook 06 shows at once: the fixed backend answers every question, the pre-fix one
# almost none.

# %%
torch.set_num_threads(1)  # the same numbers on every CPU
smoke = sc.smoke_run()
print(f"accuracy on {sc.SMOKE_QUESTIONS} questions: pre-fix {smoke['pre_fix_accuracy']:.3f}, "
      f"fixed {smoke['fixed_accuracy']:.3f}")
# the fix answers (8 of 8 on a CPU; bf16 on a GPU may miss one), the pre-fix backend far fewer
checks["smoke run"] = (smoke["fixed_accuracy"] >= 0.75 and smoke["pre_fix_accuracy"] <= smoke["fixed_accuracy"] - 0.5,
                       "the stack computes other answers than on the project's machines: run make test")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"smoke run: {smoke['seconds']:.1f} s on {smoke['device']}")

# %% [markdown]
# ## 5. How long each notebook takes here (core)
#
# `results/notebook_timings.json` holds each notebook's Run All time on the project's 2-core CPU machine
# and that machine's time for the smoke run above (`python -m tools.notebook_timings` writes it); scaled
# by this machine's smoke run, they give the wait to expect here. Reading and discussion come on top:
# see the instructor guide (`docs/instructor.md`).

# %%
# NBVAL_IGNORE_OUTPUT
timings = sc.load_timings()
expected = sc.expected_run_times(smoke["seconds"], timings)
print(f"this machine ran the smoke run in {smoke['seconds']:.1f} s, the reference machine in "
      f"{timings['reference_smoke_s']:.1f} s")
for name, seconds in expected.items():
    print(f"  {name[:-6]:40s} Run All about {seconds:5.0f} s")
checks["timings"] = (set(expected) >= {p.name for p in sc.REPO_ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")},
                     "results/notebook_timings.json misses a notebook: run python -m tools.notebook_timings")

# %% [markdown]
# ## Summary (core)

# %%
red = [name for name, (passed, _) in checks.items() if not passed]
for name in red:
    print(f"RED   {name}: {checks[name][1]}")
print(f"setup check: {len(checks) - len(red)} of {len(checks)} checks passed ({', '.join(checks)})"
      + (": all green, ready for the workshop" if not red else ""))
assert not red, f"red checks: {red}"
