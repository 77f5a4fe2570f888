"""What Triton makes of stage 1 for Hopper (sm_90a, the H100 and H200), on any machine: no GPU needed.

``compile_stage1(kinds)`` compiles the stage-1 kernels as the JIT would for a 128-head problem on an
H200 (bf16, 16-byte-aligned pointers and strides, the launch config ``split_kv_triton`` picks) with
Triton's own compiler and the ptxas it ships, and reports what a GPU engineer reads first:

* ``mma_layouts``: each wgmma result's layout, ``warps [m, n], instr [16, n, 16]``, from the TTGIR;
* ``wgmma``: tensor-core instructions in the PTX by shape (the tile loop's, per warpgroup); ``mma_sync``:
  the Ampere-style ones, per warp (what Triton uses for the tl kernel's 16-head programs);
* ``registers`` and ``spill_bytes`` (``ptxas -v``), ``shared_bytes``; ``ptx``;
* ``wgmma_serialized``: whether ptxas serialized the function's wgmma (its C7512 note, "wgmma.mma_async
  instructions are serialized due to insufficient register resources"): it then waits for each product before
  it issues the next, in the whole kernel, and nothing else in the report shows it.

``skipped_multiplies`` and ``exponentials_of_an_fma`` read two of the seesaw's softmax choices from its PTX
(``docs/kernel_essay.md``).

Kinds: "tl" (``stage1.tl.stage1_kernel``: the layouts are Triton's choice), "cp.async" and "tma"
(``split_kv_wgmma.stage1_wgmma_kernel``: the layouts are written in the kernel), "seesaw"
(``split_kv_seesaw.stage1_seesaw_kernel`` at 64 heads a program: its wgmma counted per warpgroup and pair of tiles;
at 16 or 32 the "tma" kernel, which it runs there). Triton's CPU
interpreter replaces Triton's library functions, so under it the compile runs in a child process without
it: ``python -m mla_edu.kernels.sm90 tl cp.async tma`` (the command line: ``__main__.py``).
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile

from mla_edu.device import TRITON_INTERPRET, require_triton
from mla_edu.kernels import stage1
from mla_edu.kernels.contract import STAGE1_KINDS
from mla_edu.kernels.workspace import gpu_block_h

#: Shared memory one block may use on sm90 (H100 / H200: 227 KB)
MAX_SHARED = 232448
HEADS = 128  # DeepSeek-V3's query heads: the compute-bound case
HEAD_COUNTS = (16, 32, 64, 128)  # the h_q it compiles for
BATCH, N_PAGES = 64, 64  # the problem it compiles for (B = 64, L = 4096 at page 64): which head block runs


def compile_stage1(kinds=STAGE1_KINDS, page: int = 64, dtype: str = "bf16", final: bool = False,
                   heads: int = HEADS, scheduled: bool = False) -> dict:
    """``{kind: report}`` for each of ``kinds`` (see the module docstring; a kind of ``stage1.KINDS``, compiled as
    its ``compile_spec`` says, or its fallback's where it does not apply); ``final``: the one-split variant;
    ``heads``: h_q of the problem (128: 64-head programs; 16: 16-head programs, ``stage1_swapped_kernel``);
    ``scheduled``: the balanced schedule's persistent variant (``kernels.schedule``)."""
    require_triton("compiling stage 1 for sm_90a (Triton's compiler)")
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in stage1.KINDS]
    if bad or not kinds:
        raise ValueError(f"kinds must be a non-empty selection of {tuple(stage1.KINDS)}, got {kinds}")
    if dtype not in ("bf16", "fp16"):
        raise ValueError(f"dtype must be 'bf16' or 'fp16', got {dtype!r}")
    if heads not in HEAD_COUNTS:
        raise ValueError(f"heads must be one of {HEAD_COUNTS}, got {heads!r}")
    if not TRITON_INTERPRET:
        return {k: compile_report(spec_for(k, page, dtype, final, heads, scheduled)) for k in kinds}
    cmd = [sys.executable, "-m", "mla_edu.kernels.sm90", *kinds, "--page", str(page), "--dtype", dtype,
           "--heads", str(heads)] + ["--final"] * final + ["--scheduled"] * scheduled
    run = subprocess.run(cmd, env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True, text=True)
    if run.returncode != 0:  # the error, without the binding's reference-leak report printed at exit
        err = "\n".join(ln for ln in run.stderr.splitlines() if not ln.startswith(("nanobind:", " - ")))
        raise RuntimeError(f"compiling stage 1 for sm_90a failed ({' '.join(cmd)}):\n{err[-4000:]}")
    return json.loads(run.stdout)


def spec_for(kind: str, page: int = 64, dtype: str = "bf16", final: bool = False, heads: int = HEADS,
             scheduled: bool = False) -> stage1.CompileSpec:
    """The ``CompileSpec`` of the kernel that runs ``kind`` (``stage1.running_kind``) for the problem this module
    compiles for (``BATCH`` requests of ``N_PAGES`` pages, ``heads`` heads), as a launch would configure it."""
    from mla_edu.kernels.split_kv_wgmma import compile_cache

    ran = stage1.running_kind(kind, gpu_block_h(heads, BATCH, N_PAGES, scheduled), compile_cache(page, dtype))
    compile_spec = stage1.impl(ran).compile_spec
    if compile_spec is None:
        raise ValueError(f"stage-1 kind {ran!r} has no compile_spec: it cannot be compiled for sm_90a here")
    return compile_spec(ran, page, dtype, final, heads, scheduled, BATCH, N_PAGES)


def signature(fn, dtype: str, consts: dict, descriptors: dict) -> tuple[dict, dict]:
    """Triton's signature (name -> type string) and attributes (16-byte divisibility of pointers and strides)."""
    pointers = {"seq_lens_ptr": "*i32", "table_ptr": "*i32", "o_acc_ptr": "*fp32",
                "lse_ptr": "*fp32"}
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name.endswith("_ptr"):
            sig[name] = pointers.get(name, f"*{dtype}")
        elif name in descriptors:
            sig[name] = descriptors[name]
        elif name in consts:
            sig[name] = "constexpr"
        else:
            sig[name] = "fp32" if name == "sm_scale" else "i32"
        if name.endswith("_ptr") or name.startswith("stride"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def compile_report(spec: stage1.CompileSpec, dtype: str = "bf16") -> dict:
    """Compile ``spec`` for sm_90a with Triton's compiler and its ptxas, and read the report (the module
    docstring's keys). Runs in a process without Triton's interpreter (``compile_stage1`` starts one under it):
    RuntimeError otherwise."""
    if TRITON_INTERPRET:
        raise RuntimeError("compile_report needs a process without Triton's interpreter (TRITON_INTERPRET=0): "
                           "under it Triton's kernels are the interpreter's, not the compiler's")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    descriptors = {name: mangle_type(d) for name, d in spec.descriptors.items()}
    sig, attrs = signature(spec.kernel, dtype, spec.constexprs, descriptors)
    src = (GluonASTSource if spec.gluon else ASTSource)(spec.kernel, sig, spec.constexprs, attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=spec.options)
    ptx = kernel.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/k.ptx", "w") as f:
            f.write(ptx)
        log = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"],
                             capture_output=True, text=True, check=True).stderr
    mma = r"nvidia_mma<\{[^}]*warpsPerCTA = (\[[\d, ]+\]), instrShape = (\[[\d, ]+\])"
    layouts = re.findall(mma, kernel.asm["ttgir"])
    wgmma = collections.Counter(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))
    if spec.per_warpgroup:  # its PTX holds both warpgroups' code (the same instructions): per warpgroup
        wgmma = {shape: n // 2 for shape, n in wgmma.items()}
    return {"mma_layouts": sorted({f"warps {w}, instr {i}" for w, i in layouts}), "wgmma": dict(wgmma),
            "mma_sync": dict(collections.Counter(re.findall(r"\bmma\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))),
            "registers": int(re.search(r"Used (\d+) registers", log)[1]),
            "spill_bytes": sum(map(int, re.findall(r"(\d+) bytes spill (?:stores|loads)", log))),
            "wgmma_serialized": "(C7512)" in log and "wgmma.mma_async instructions are serialized" in log,
            "shared_bytes": kernel.metadata.shared, "ptx": ptx}


def skipped_multiplies(ptx: str) -> list[int]:
    """For each warp reduction of a flag (``redux.sync``) in ``ptx`` followed at once by a branch around a block:
    the ``mul.f32`` instructions of that block, what the branch skips (the seesaw's rescales of its output where no
    row's max moved: ``split_kv_seesaw._rescaled``)."""
    counts, lines = [], ptx.splitlines()
    for i, line in enumerate(lines):
        if "redux.sync" not in line:
            continue
        branch = next((ln for ln in lines[i + 1:i + 6] if " bra " in ln), None)
        if branch is None:
            continue
        target = branch.split()[-1].rstrip(";") + ":"
        end = next(j for j in range(i, len(lines)) if lines[j].split("//")[0].strip() == target)
        counts.append(sum("mul.f32" in ln for ln in lines[i:end]))
    return counts


def exponentials_of_an_fma(ptx: str) -> int:
    """The ``ex2.approx`` instructions of ``ptx`` whose argument an ``fma.rn.f32`` computed (the seesaw's P =
    2^(S qk_scale - m), ``split_kv_seesaw._scores``)."""
    fma_out = set(re.findall(r"fma\.rn\.f32\s+(%r\d+),", ptx))
    return sum(arg in fma_out for arg in re.findall(r"ex2\.approx\S*\s+%r\d+, (%r\d+);", ptx))


def to_markdown(reports: dict, command: str, heads: int = HEADS) -> str:
    """The report of ``compile_stage1`` as a table, with the command and the Triton that compiled it."""
    import triton

    block_h = gpu_block_h(heads, BATCH, N_PAGES)
    lines = ["# Stage 1 compiled for sm_90a (H100 / H200), without a GPU", "",
             f"Command: `{command}`; triton {triton.__version__}, Python {sys.version.split()[0]}. h_q = {heads} "
             f"({block_h}-head programs{', the Gluon kinds swapped' if block_h < 64 else ''}), bf16 unless the command "
             "says otherwise. wgmma: instructions in the PTX by shape (the tile loop's, per warpgroup).", "",
             "| kind | wgmma layouts (warps, instruction) | wgmma per tile and warpgroup | registers | spill bytes "
             "| shared bytes |", "|---|---|---|---|---|---|"]
    for kind, r in reports.items():
        wgmma = ", ".join(f"{n} x {shape}" for shape, n in r["wgmma"].items()) or "none: " + ", ".join(
            f"{n} x mma.sync {shape} per warp" for shape, n in r.get("mma_sync", {}).items())
        if kind == "seesaw" and "m64n64k16" in r["wgmma"]:
            wgmma += " (a pair of tiles: one scored, both multiplied)"
        lines.append(f"| {kind} | {'; '.join(r['mma_layouts'])} | {wgmma} | {r['registers']} | {r['spill_bytes']} "
                     f"| {r['shared_bytes']:,} |")
    return "\n".join(lines) + "\n"
