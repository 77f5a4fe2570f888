"""A CUDA-graph emulator for machines without a GPU.

Capture runs the code once under a ``TorchDispatchMode`` that records every aten op
(and every custom op, e.g. a Triton kernel registered with ``torch.library.custom_op``,
as ONE op) with the tensors it read and wrote. Replay re-runs the recorded ops, in order,
on the same storages, with the same scalar arguments. So, exactly as with a CUDA graph:

* host Python does not run at replay: ``.item()`` values, Python ints, shapes, views and
  slices, the grid and arguments of a kernel launch are whatever they were at capture;
* buffers persist between replays (stale contents stay);
* capture only records: after capture, buffers that existed before it hold what they held
  before it, and tensors allocated during capture hold poison until the first replay;
* a tensor the graph uses whose last Python reference was dropped after capture is freed
  memory: every replay first fills it with poison (:mod:`mla_edu.graphs.poison`), or, with
  ``strict=True``, replay raises :class:`FreedMemoryError` naming the op that uses it;
  likewise a storage that moved after capture (``resize_`` to a larger size reallocates it): the
  graph keeps the old, freed address, so replay runs on a poisoned stand-in of the old size and
  leaves the owner's new memory alone (strict: :class:`FreedMemoryError`);
  another capture into the same pool may be handed that memory for its own tensors, as
  the CUDA caching allocator does (smallest free block that fits);
* syncing calls during capture raise :class:`GraphCaptureError` (``.item()``, ``bool(t)``,
  ``.tolist()``, ``.cpu()``, ``.to("cpu")``, ``.numpy()``, pickling (``pickle.dumps``, ``torch.save``),
  printing a tensor, ``torch.tensor(data)``, and
  ops whose output shape depends on data: ``nonzero``, boolean-mask indexing, ``unique``...);
* a capture that fails records nothing: the next capture into the same graph starts empty;
  capturing a graph while another one is capturing raises :class:`GraphCaptureError`;
* a capture that runs a matmul (cuBLAS on a GPU) that never ran in a warm-up on that device
  warns (:class:`GraphWarmupWarning`): on a GPU, the first matmul creates cuBLAS's handle, which
  capture refuses (``CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate(handle)``, then
  ``cudaErrorStreamCaptureInvalidated``). PyTorch's rule: warm up on a side stream before
  capturing (https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs);
  ``Graph.capture(fn, warmup=1)`` and ``mla_edu.graphs.warm_up`` do, and tell the emulator.

Random ops re-run at replay, so each replay draws fresh numbers (CUDA graphs advance the
Philox offset per replay too). Raw Triton launches (not wrapped in a custom op) are
recorded as one launch when Triton runs in its CPU interpreter.

Replay cost: a flat list of ``functools.partial`` closures built at capture end; view
ops and ``empty`` cost nothing, out-of-place ops write straight into the captured output
through their ``out=`` overload when one exists.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import sys
import warnings
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from mla_edu.graphs.poison import poison_

__all__ = ["GraphCaptureError", "GraphWarmupWarning", "FreedMemoryError", "EmulatedPool", "Program", "Recorder",
           "capturing", "forget_warmups", "host_tensor", "is_host_tensor", "watch_warmup"]


class GraphCaptureError(RuntimeError):
    """An operation that a CUDA graph capture refuses (it needs the host to wait for the device)."""


class GraphWarmupWarning(UserWarning):
    """A capture ran an op that lazily initialises a library on a GPU, with no warm-up before it."""


class FreedMemoryError(RuntimeError):
    """Replay would touch memory whose owner dropped it after capture (strict mode)."""


_aten = torch.ops.aten
_EMPTY_FACTORIES = {
    _aten.empty.memory_format,
    _aten.empty_strided.default,
    _aten.empty_like.default,
    _aten.new_empty.default,
    _aten.new_empty_strided.default,
}
_METADATA_OPS = {_aten.set_.source_Storage_storage_offset, _aten.set_.source_Storage, _aten.set_.source_Tensor,
                 _aten.set_.default, _aten.resize_.default, _aten.resize_as_.default}

# Ops that create cuBLAS's handle on their first call on a GPU: not permitted inside a capture.
_CUBLAS_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_addmm_activation"}
# Device types on which a warm-up ran such an op (mla_edu.graphs.warm_up, Graph.capture(warmup>=1)).
_WARMED: set[str] = set()


class _WarmupWatch(TorchDispatchMode):
    """Notes the device types on which a warm-up ran a cuBLAS op (only while warming up)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in _CUBLAS_OPS:
            _WARMED.update(t.device.type for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out


@contextlib.contextmanager
def watch_warmup():
    """Note the cuBLAS ops run inside the block as warmed up on their device (see ``warm_up``)."""
    with _WarmupWatch():
        yield


def forget_warmups() -> None:
    """Forget every warm-up seen so far, as a fresh process would have none: the next capture of a
    matmul warns again (a notebook cell that shows the warning can then be re-run)."""
    _WARMED.clear()


def _unwarmed_cublas(ops: list[str], device_type: str) -> list[str]:
    """The recorded cuBLAS ops (``aten.mm.default``...) when no warm-up ran one on ``device_type``."""
    if device_type in _WARMED:
        return []
    return sorted({op for op in ops if op.startswith("aten.") and op.split(".")[1] in _CUBLAS_OPS})


# Emulated captures in progress (not observe-only ones): host code must not read device values meanwhile.
_CAPTURES = [0]
#: the module of Triton's interpreter, whose ``InterpretedFunction.run`` a capture records launches through
_INTERPRETER = "triton.runtime.interpreter"


def capturing() -> bool:
    """True while an emulated capture records (a device value read on the host now would be refused)."""
    return _CAPTURES[0] > 0


# Storage reference counts we hold ourselves (shadow tensors), across all programs.
_INTERNAL_REFS: dict[int, int] = {}
_use_count = torch._C._storage_Use_Count


def _hold(cdata: int) -> None:
    _INTERNAL_REFS[cdata] = _INTERNAL_REFS.get(cdata, 0) + 1


def _release(held: list[int]) -> None:
    for cdata in held:
        n = _INTERNAL_REFS.get(cdata, 0) - 1
        if n <= 0:
            _INTERNAL_REFS.pop(cdata, None)
        else:
            _INTERNAL_REFS[cdata] = n


def _user_refs(cdata: int) -> int:
    """References to a storage held outside the emulator (tensors, views the user holds).

    Once Python has asked for ``tensor.untyped_storage()``, the storage's Python object is
    kept alive by the storage and counts one; every shadow tensor we hold counts one.
    """
    return _use_count(cdata) - 1 - _INTERNAL_REFS.get(cdata, 0)


# Storages marked as host memory (CPU tensors that stand for pinned/pageable host buffers).
_HOST: dict[int, weakref.ref] = {}


def host_tensor(t: torch.Tensor) -> torch.Tensor:
    """Mark ``t`` as *host* memory for the emulator, and return it.

    On a GPU, host tensors are simply CPU tensors (``seq_lens_cpu``): host code may read them
    during capture (``int(seq_lens_cpu.max())``), and that value is frozen into the graph. On
    CPU everything is a CPU tensor, so the emulator needs to be told which ones play the host:
    ops whose tensor inputs are all host tensors run at capture only (never at replay) and
    their outputs are host tensors; ``.item()``, ``.tolist()``, printing are allowed on them.
    When the graph's device is a GPU (real or emulated), every CPU tensor is host memory anyway.
    A no-op for tensors on a CUDA device.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"host_tensor expects a torch.Tensor, got {type(t).__name__}")
    if t.device.type == "cpu":
        storage = t.untyped_storage()
        _HOST[storage._cdata] = weakref.ref(storage)
    return t


def is_host_tensor(t: torch.Tensor) -> bool:
    """True if ``t`` lives in memory marked with :func:`host_tensor`."""
    storage = t.untyped_storage()
    ref = _HOST.get(storage._cdata)
    return ref is not None and ref() is storage


def _is_host(t: torch.Tensor, device_type: str) -> bool:
    """Host memory for a graph on ``device_type``: marked tensors, and any CPU tensor beside a GPU."""
    return (t.device.type == "cpu" and device_type != "cpu") or is_host_tensor(t)


def _all_host(flat, device_type: str) -> bool:
    tensors = [x for x in flat if isinstance(x, torch.Tensor)]
    return bool(tensors) and all(_is_host(x, device_type) for x in tensors)


def _to_host(args, kwargs, device_type: str) -> bool:
    """Whether ``tensor.to(*args, **kwargs)`` copies a device tensor to the host: its target is the string
    ``"cpu"`` (code written for a GPU asks for host memory so), or a CPU device or tensor while the emulated
    device is not the CPU. On an emulated CPU device, ``x.to(t.device)`` is a same-device call and passes."""
    for x in (kwargs.get("device"), *args[:1]):
        if isinstance(x, str) and x.split(":")[0] == "cpu":
            return True
        if device_type != "cpu" and isinstance(x, torch.device) and x.type == "cpu":
            return True
        if device_type != "cpu" and isinstance(x, torch.Tensor) and x.device.type == "cpu":
            return True
    return False


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


@dataclass(eq=False)
class _Block:
    """One storage a graph touches."""

    cdata: int
    nbytes: int
    device: torch.device
    origin: str  # "external" (existed before capture) or "capture" (allocated during it)
    poison_view: torch.Tensor  # the first shadow seen, used to poison the block
    first_use: str  # the op that first showed it: "op #0 aten.empty.memory_format"
    first_kernel: str = ""  # the first recorded op that replay runs on it
    escaped: bool = False  # capture-allocated and still referenced at capture end
    freed: bool = False  # its owner dropped it after capture
    data_ptr: int = 0  # its address at capture end
    moved: bool = False  # its storage was reallocated after capture (resize_): the graph keeps data_ptr
    reassigned: bool = False  # handed to another capture in the same pool


class EmulatedPool:
    """A memory pool shared by emulated graphs (``pool=g.pool()``).

    Holds the programs captured into it; a later capture into the pool is handed the
    blocks those programs no longer own (temporaries, and tensors dropped after capture).
    """

    def __init__(self) -> None:
        self._programs: list[weakref.ref] = []

    def add(self, program: "Program") -> None:
        """Hold ``program`` (weakly): its blocks become free to later captures once it no longer owns them."""
        self._programs.append(weakref.ref(program))

    def _free_blocks(self) -> list[_Block]:
        free = []
        for ref in self._programs:
            prog = ref()
            if prog is None:
                continue
            prog.refresh_freed()
            free += [b for b in prog.blocks.values()
                     if b.origin == "capture" and not b.reassigned and (b.freed or not b.escaped)]
        return sorted(free, key=lambda b: b.nbytes)

    def __repr__(self) -> str:
        return f"EmulatedPool(graphs={sum(r() is not None for r in self._programs)})"


def _is_write(arg) -> bool:
    return arg.alias_info is not None and arg.alias_info.is_write


@functools.lru_cache(maxsize=None)
def _out_overload(func):
    """The ``out=`` overload of a functional op with the same inputs, and its out-arg names."""
    schema = func._schema
    if any(_is_write(a) for a in schema.arguments) or not schema.returns:
        return None
    if any(str(r.type) != "Tensor" for r in schema.returns):
        return None
    sig = [(a.name, str(a.type)) for a in schema.arguments]
    packet = func.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        args = cand._schema.arguments
        ins = [(a.name, str(a.type)) for a in args if not _is_write(a)]
        outs = [a.name for a in args if _is_write(a) and a.kwarg_only]
        if ins == sig and len(outs) == len(schema.returns):
            return cand, tuple(outs)
    return None


def _run_and_copy(func, args, kwargs, positions, shadows):
    flat, _ = tree_flatten(func(*args, **kwargs))
    for i, s in zip(positions, shadows):
        s.copy_(flat[i])


def _check_capturable(func, args, kwargs) -> None:
    tags = func.tags
    name = str(func)
    if torch.Tag.data_dependent_output in tags:
        raise GraphCaptureError(
            f"{name} during graph capture: it returns a value computed on the device to the host "
            "(like .item() or bool(tensor)), which makes the host wait for the device. CUDA refuses "
            "this while capturing ('operation not permitted when stream is capturing'), and a graph "
            "could not replay it anyway: host code does not run at replay. Keep the value on the device.")
    is_index = func in (_aten.index.Tensor, _aten.index_put_.default, _aten.index_put.default,
                        _aten._index_put_impl_.default)
    if torch.Tag.dynamic_output_shape in tags and not is_index:
        raise GraphCaptureError(
            f"{name} during graph capture: its output shape depends on tensor values, so the host must "
            "wait for the device to size the output. CUDA capture refuses this; a graph has fixed "
            "shapes. Use a fixed-size mask (torch.where, masked_fill) instead.")
    if is_index:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        for idx in indices:
            if isinstance(idx, torch.Tensor) and idx.dtype in (torch.bool, torch.uint8):
                raise GraphCaptureError(
                    f"{name} with a boolean mask during graph capture: the number of selected entries "
                    "is data-dependent (it runs nonzero and waits for the device). CUDA capture refuses "
                    "this. Use torch.where / masked_fill, or integer indices of fixed length.")
    if func is _aten.lift_fresh.default:
        raise GraphCaptureError(
            "torch.tensor(data) during graph capture copies host data to the device, a synchronous "
            "copy that CUDA refuses while capturing, and a graph would replay the capture-time "
            "constant anyway. Create the tensor before capture and copy new values into it.")


class Program:
    """What an emulated capture recorded: blocks, shadow tensors, and the replay steps."""

    def __init__(self, strict: bool = False, observe: bool = False, device_type: str = "cuda") -> None:
        self.strict = strict
        self.device_type = device_type  # observe mode: ops touching this device type are tracked
        self.observe = observe  # track storages only (alongside a real CUDA capture): no replay steps
        self.blocks: dict[int, _Block] = {}
        self.ops: list[str] = []  # names of recorded ops, in order
        self.steps: list = []  # replay closures
        self._entries: list = []
        self._shadows: dict[tuple, torch.Tensor] = {}
        self._held: list[int] = []
        self._snapshots: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}
        self._saved_rows: list[tuple] = []  # (tensor, dim, index, rows before an index_copy_ wrote them)
        self._finalizer = weakref.finalize(self, _release, self._held)
        self.freed_uses: list[str] = []  # descriptions of freed blocks replay touched
        self._watch: list[_Block] = []

    # ---- capture -------------------------------------------------------------------
    def shadow(self, t: torch.Tensor, op_desc: str, origin: str) -> torch.Tensor:
        """Our own tensor over ``t``'s storage with ``t``'s geometry (no autograd link to ``t``)."""
        storage = t.untyped_storage()
        cdata = storage._cdata
        key = (cdata, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        s = self._shadows.get(key)
        if s is None:
            with torch.no_grad():
                s = torch.empty(0, dtype=t.dtype, device=t.device).set_(
                    storage, t.storage_offset(), t.shape, t.stride())
            self._shadows[key] = s
            self._held.append(cdata)
            _hold(cdata)
            if cdata not in self.blocks:
                self.blocks[cdata] = _Block(cdata, storage.nbytes(), t.device, origin, s, op_desc)
        return s

    def snapshot(self, t: torch.Tensor) -> None:
        """Remember an external storage's bytes before capture first writes to it."""
        if self.observe:
            return
        cdata = _storage_key(t)
        blk = self.blocks.get(cdata)
        if blk is not None and blk.origin == "external" and cdata not in self._snapshots and t.numel():
            storage = t.untyped_storage()
            self._snapshots[cdata] = (storage, storage.clone())

    def snapshot_rows(self, t: torch.Tensor, dim: int, index: torch.Tensor) -> None:
        """Before ``t.index_copy_(dim, index, ...)`` on an old buffer: remember only the rows it
        overwrites (a KV cache of gigabytes is written a few slots at a time)."""
        if self.observe:
            return
        blk = self.blocks.get(_storage_key(t))
        if blk is not None and blk.origin == "external" and blk.cdata not in self._snapshots and t.numel():
            with torch.no_grad():
                self._saved_rows.append((t, dim, index.clone(), t.index_select(dim, index)))

    def _restore(self) -> None:
        """Give old buffers the bytes they held before capture (whole storages, then rows, newest first)."""
        with torch.no_grad():
            for storage, saved in self._snapshots.values():
                storage.copy_(saved)
            for t, dim, index, rows in reversed(self._saved_rows):
                t.index_copy_(dim, index, rows)
        self._snapshots.clear()
        self._saved_rows.clear()

    def abort_capture(self) -> None:
        """A capture failed: give old buffers their bytes back and keep no recorded work."""
        self._restore()
        self._entries.clear()
        self.ops.clear()

    def end_capture(self) -> None:
        """Capture only records: undo its writes to old buffers, poison what it allocated, build replay."""
        if not self.observe:
            cold = _unwarmed_cublas(self.ops, self.device_type)
            if cold:
                warnings.warn(
                    f"this capture ran {', '.join(cold)} with no warm-up on {self.device_type}. On a GPU the "
                    "first matmul creates cuBLAS's handle, which a capture refuses: 'CUBLAS_STATUS_NOT_INITIALIZED "
                    "when calling cublasCreate(handle)', then cudaErrorStreamCaptureInvalidated at capture end. "
                    "PyTorch's rule: warm up on a side stream before capturing "
                    "(https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs); "
                    "Graph.capture(fn, warmup=1) or mla_edu.graphs.warm_up(fn) does.",
                    GraphWarmupWarning, stacklevel=4)
        self._restore()
        with torch.no_grad():
            for blk in self.blocks.values():
                if blk.origin == "capture":
                    blk.escaped = _user_refs(blk.cdata) > 0
                    if blk.escaped and not self.observe:
                        poison_(_whole(blk.poison_view))
        self._watch = [b for b in self.blocks.values() if b.origin == "external" or b.escaped]
        for blk in self._watch:
            blk.data_ptr = blk.poison_view.untyped_storage().data_ptr()
        if not self.observe:
            self.steps = [step for step in (_build_step(*e) for e in self._entries) if step is not None]
        self._entries.clear()

    # ---- replay --------------------------------------------------------------------
    def refresh_freed(self) -> list[_Block]:
        """Mark blocks whose last outside reference is gone (returns the newly freed ones) and blocks
        whose storage moved (``resize_``), which replay then runs on a stand-in."""
        newly = []
        for blk in self._watch:
            if not blk.freed and _user_refs(blk.cdata) <= 0:
                blk.freed = True
                newly.append(blk)
            elif blk.poison_view.untyped_storage().data_ptr() != blk.data_ptr:
                blk.moved = True
                if not self.observe:
                    self._stand_in(blk)
        if newly or any(b.moved for b in self._watch):
            self._watch = [b for b in self._watch if not (b.freed or b.moved)]
        return newly

    def _stand_in(self, blk: _Block) -> None:
        """A moved block: the graph's ops now use a storage of the old size (poisoned at each replay),
        as a CUDA graph keeps the old address; the owner's reallocated storage is left alone."""
        stand_in = torch.empty(blk.nbytes, dtype=torch.uint8, device=blk.device).untyped_storage()
        with torch.no_grad():
            for key, s in self._shadows.items():
                if key[0] == blk.cdata:
                    s.set_(stand_in, s.storage_offset(), s.shape, s.stride())
        held = [c for c in self._held if c == blk.cdata]  # our shadows no longer hold the owner's storage
        self._held[:] = [c for c in self._held if c != blk.cdata]
        _release(held)

    def replay(self) -> None:
        self.refresh_freed()
        freed = [b for b in self.blocks.values() if b.freed or b.moved]
        if freed:
            self.freed_uses = [
                f"{b.first_kernel or b.first_use} uses {_describe(b.poison_view)} ({b.nbytes} bytes, "
                f"{'allocated during capture by ' + b.first_use if b.origin == 'capture' else 'created before capture'}"
                + ("), whose storage moved after capture (resize_ reallocated it): the graph keeps the old, freed "
                   "address" if b.moved else "), whose last reference was dropped after capture")
                + ("; another capture in the same pool now owns it" if b.reassigned else "")
                for b in freed]
            if self.strict:
                raise FreedMemoryError(
                    "replay would touch freed memory: " + "; ".join(self.freed_uses)
                    + ". On a GPU that memory belongs to the next allocation: keep every buffer a graph "
                    "uses alive and in place (allocate it once, before capture; never resize_ it) for as long "
                    "as the graph lives.")
            if not self.observe:
                with torch.inference_mode():
                    for b in freed:
                        if not b.reassigned:
                            poison_(_whole(b.poison_view))
        else:
            self.freed_uses = []
        if self.observe:
            return
        with torch.inference_mode():
            for step in self.steps:
                step()


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A flat view over the whole storage of ``t`` in ``t``'s dtype."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))


def _build_step(kind, func, args, kwargs, fresh, shadows):
    if kind == "launch":
        return functools.partial(func, *args, **kwargs)
    if kind == "host":
        return None
    if not fresh:
        return functools.partial(func, *args, **kwargs)
    if kind == "functional":
        ov = _out_overload(func)
        if ov is not None:
            out_func, names = ov
            return functools.partial(out_func, *args, **kwargs, **dict(zip(names, shadows)))
    return functools.partial(_run_and_copy, func, args, kwargs, fresh, shadows)


class _PatchOnLoad:
    """A ``sys.meta_path`` finder, on while a capture records: when Triton's interpreter module loads, ``patch`` runs
    on it as soon as the module has run (its kernels' launches are then recorded, as where it was loaded before)."""

    def __init__(self, patch) -> None:
        self.patch = patch

    def find_spec(self, name, path, target=None):
        if name != _INTERPRETER:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        exec_module, patch = spec.loader.exec_module, self.patch

        def exec_then_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_then_patch  # this module's own loader
        return spec


class Recorder(TorchDispatchMode):
    """Records ops into a :class:`Program` during an emulated capture."""

    def __init__(self, program: Program, pool: EmulatedPool | None = None) -> None:
        super().__init__()
        self.program = program
        self.pool = pool
        self.observe = program.observe  # beside a real CUDA capture: CUDA enforces its own rules
        self._free = pool._free_blocks() if pool is not None and not self.observe else []
        self._depth = 0
        self._patches: list = []
        self._finder: _PatchOnLoad | None = None  # on sys.meta_path while this capture records, where it put one

    # ---- entering / leaving --------------------------------------------------------
    def __enter__(self):
        if not self.observe:
            self._patch_host_syncs()
            _CAPTURES[0] += 1
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if not self.observe:
                _CAPTURES[0] -= 1
            if self._finder in sys.meta_path:
                sys.meta_path.remove(self._finder)
            self._finder = None
            for owner, name, old in reversed(self._patches):
                setattr(owner, name, old)
            self._patches.clear()

    def _patch_host_syncs(self) -> None:
        device_type = self.program.device_type
        def refuse(what, old):
            def method(self_tensor, *a, **k):
                if _is_host(self_tensor, device_type):
                    return old(self_tensor, *a, **k)
                raise GraphCaptureError(
                    f"{what} during graph capture: it copies device data to the host and waits for the "
                    "device. CUDA refuses this while capturing, and host code does not run at replay "
                    "anyway. Keep values on the device; print or inspect after replay.")
            return method

        for name, what in [("tolist", "tensor.tolist()"), ("cpu", "tensor.cpu()"), ("numpy", "tensor.numpy()"),
                           ("__repr__", "printing a tensor"), ("__array__", "np.asarray(tensor)"),
                           ("__reduce_ex__", "pickling a tensor (pickle.dumps, torch.save)")]:
            old = getattr(torch.Tensor, name)
            self._patches.append((torch.Tensor, name, old))
            setattr(torch.Tensor, name, refuse(what, old))
        old_to = torch.Tensor.to

        def to(self_tensor, *a, **k):  # x.to("cpu"), x.to(torch.device("cpu"), ...): a device-to-host copy
            if not _is_host(self_tensor, device_type) and _to_host(a, k, device_type):
                return refuse("tensor.to('cpu')", old_to)(self_tensor, *a, **k)
            return old_to(self_tensor, *a, **k)

        self._patches.append((torch.Tensor, "to", old_to))
        torch.Tensor.to = to
        # Triton's kernels in its CPU interpreter launch through InterpretedFunction.run: patched where its module is
        # loaded, else as it loads (a first `import triton` inside the capture loads it), never by asking the machine
        # whether Triton is installed, so that a capture runs the same code with and without it
        interpreter = sys.modules.get(_INTERPRETER)
        if interpreter is not None:
            self._patch_interpreter(interpreter)
        else:
            self._finder = _PatchOnLoad(self._patch_interpreter)
            sys.meta_path.insert(0, self._finder)

    def _patch_interpreter(self, interpreter) -> None:
        cls = interpreter.InterpretedFunction
        orig_run = cls.run
        recorder = self

        def run(fn_self, *args, grid, warmup, **kwargs):
            if warmup or recorder._depth > 0:
                return orig_run(fn_self, *args, grid=grid, warmup=warmup, **kwargs)
            return recorder._record_launch(orig_run, fn_self, args, kwargs, grid)

        self._patches.append((cls, "run", orig_run))
        cls.run = run

    # ---- recording -----------------------------------------------------------------
    def _record_launch(self, orig_run, fn_self, args, kwargs, grid):
        with _disable_current_modes():
            self._record_launch_unguarded(orig_run, fn_self, args, kwargs, grid)

    def _record_launch_unguarded(self, orig_run, fn_self, args, kwargs, grid):
        prog = self.program
        desc = f"op #{len(prog.ops)} triton launch {getattr(fn_self, '__name__', fn_self)}"
        flat, spec = tree_flatten((list(args), kwargs))
        shadows = []
        for x in flat:
            if isinstance(x, torch.Tensor):
                s = prog.shadow(x, desc, "external")
                prog.snapshot(x)  # a kernel may write any pointer it gets
                shadows.append(s)
            else:
                shadows.append(x)
        sargs, skwargs = tree_unflatten(shadows, spec)
        orig_run(fn_self, *sargs, grid=grid, warmup=False, **skwargs)
        prog.ops.append(desc.split(" ", 2)[2])
        for t in sargs:
            if isinstance(t, torch.Tensor):
                blk = prog.blocks[_storage_key(t)]
                blk.first_kernel = blk.first_kernel or desc
        bound = functools.partial(orig_run, fn_self, grid=grid, warmup=False)
        prog._entries.append(("launch", bound, tuple(sargs), skwargs, (), ()))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        prog = self.program
        flat_args, spec = tree_flatten((args, kwargs))
        tensors = [x for x in flat_args if isinstance(x, torch.Tensor)]
        if self.observe and tensors and not any(x.device.type == prog.device_type for x in tensors):
            return func(*args, **kwargs)  # host work beside a CUDA capture (factories are tracked)
        if _all_host(flat_args, prog.device_type):  # host work: runs now, never at replay
            out = func(*args, **kwargs)
            for o in tree_flatten(out)[0]:
                if isinstance(o, torch.Tensor):
                    host_tensor(o)
            return out
        if not self.observe:
            _check_capturable(func, args, kwargs)
        desc = f"op #{len(prog.ops)} {func}"
        schema = func._schema
        mutated = []
        for a, v in zip(schema.arguments, _schema_values(schema, args, kwargs)):
            if _is_write(a):
                mutated += [t for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor)]
        known_before = set()
        sflat = []
        for x in flat_args:
            if isinstance(x, torch.Tensor):
                sflat.append(prog.shadow(x, desc, "external"))
                known_before.add(_storage_key(x))
            else:
                sflat.append(x)
        if func is _aten.index_copy_.default:  # sflat[0]: our shadow of the buffer written
            prog.snapshot_rows(sflat[0], args[1], args[2])
        else:
            for t in mutated:
                prog.snapshot(t)
        self._depth += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self._depth -= 1
        flat_out, out_spec = tree_flatten(out)
        fresh, out_shadows = [], []
        for i, o in enumerate(flat_out):
            if not isinstance(o, torch.Tensor):
                continue
            key = _storage_key(o)
            if key in known_before or key in prog.blocks:
                continue
            o = self._maybe_reuse(o)
            flat_out[i] = o
            fresh.append(i)
            out_shadows.append(prog.shadow(o, desc, "capture"))
        if func in _METADATA_OPS or torch.Tag.inplace_view in func.tags:
            kind = "host"  # shape/stride/storage changes happen on the host, once
        elif func in _EMPTY_FACTORIES:
            kind = "host"  # an allocation launches no kernel
        elif mutated:
            kind = "mutating"
        elif fresh:
            kind = "functional"
        else:
            kind = "host"  # a view: the shadow already aliases the storage
        prog.ops.append(str(func))
        if kind != "host":
            for t in [*sflat, *out_shadows]:
                if isinstance(t, torch.Tensor):
                    blk = prog.blocks[_storage_key(t)]
                    blk.first_kernel = blk.first_kernel or desc
            sargs, skwargs = tree_unflatten(sflat, spec)
            prog._entries.append((kind, func, sargs, skwargs, tuple(fresh), tuple(out_shadows)))
        return tree_unflatten(flat_out, out_spec)

    def _maybe_reuse(self, o: torch.Tensor) -> torch.Tensor:
        """Hand a fresh output the smallest free block of the shared pool that fits (CUDA's best fit)."""
        if not self._free or o.storage_offset() != 0:
            return o
        need = o.untyped_storage().nbytes()
        for j, blk in enumerate(self._free):
            if blk.nbytes >= need and blk.device == o.device:
                del self._free[j]
                blk.reassigned = True
                storage = blk.poison_view.untyped_storage()
                with torch.no_grad():
                    new = torch.empty(0, dtype=o.dtype, device=o.device).set_(storage, 0, o.shape, o.stride())
                    new.copy_(o)
                return new
        return o


def _schema_values(schema, args, kwargs):
    """The value passed for each schema argument (positional, then keyword, else default)."""
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        else:
            out.append(None)
    return out
