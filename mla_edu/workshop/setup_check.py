"""What notebook 00 checks before a workshop, each check a verdict with one specific remedy.

    from mla_edu.workshop import setup_check as sc
    report = sc.Report()
    report.run("versions", sc.check_versions)   # registered first: a check that raises counts as red
    report.summary()                            # "setup check: 7 of 7 checks passed (...)..." or the red ones

The checks: the kernel (this checkout's mla_edu, the lock's Python), the versions of the packages a learner
imports against this platform's lock, Triton (a pass with a note where it has no wheel), one widget
displayed and read back, the shipped model's checksum, a few-second smoke run, and how long each notebook
should take on this machine (``results/notebook_timings.json``, written by ``python -m tools.notebook_timings``).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from mla_edu.paths import REPO_ROOT, RESULTS_DIR

TIMINGS_JSON = RESULTS_DIR / "notebook_timings.json"
SMOKE_QUESTIONS = 8  # the smoke run's size: a few seconds on a laptop CPU
UNLOCKED_ENV = "MLA_EDU_UNLOCKED"  # "1" in make test-latest, whose environment has the newest versions on purpose
LOCK_PYTHON = (3, 11)  # the Python the locks are compiled for (Makefile LOCK_ARGS)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # where torch's +cpu builds live
SETUP_PAGE = "docs/setup.md"
#: packages a check of their own covers when missing: the versions check reports them only at a wrong version
OWN_CHECK = {"triton": "triton", "ipywidgets": "widgets", "jupyterlab-widgets": "widgets"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


@dataclass
class Verdict:
    """A check's outcome: ``lines`` to print, and a ``note`` with a pass or the one ``remedy`` of a failure."""

    passed: bool
    lines: tuple[str, ...] = ()
    note: str = ""
    remedy: str = ""

    def __post_init__(self):
        if not isinstance(self.passed, bool):
            raise TypeError(f"passed: expected a bool, got {self.passed!r}")
        if not self.passed and not self.remedy:
            raise ValueError("a failed check needs its remedy")


class Report:
    """The notebook's checks in order. ``run`` registers a check as red before calling it, so a check that
    raises stays red (with the exception in its remedy) and the summary counts it."""

    def __init__(self):
        self.verdicts: dict[str, Verdict] = {}

    def run(self, name: str, check, *args, **kwargs) -> None:
        """Registers ``name`` as red, calls ``check(*args, **kwargs)``, records and prints its verdict."""
        if not isinstance(name, str) or not name or name in self.verdicts:
            raise ValueError(f"name: expected a new check name, got {name!r} (have {list(self.verdicts)})")
        self.verdicts[name] = Verdict(False, remedy="the check did not finish: run its cell again")
        try:
            verdict = check(*args, **kwargs)
            if not isinstance(verdict, Verdict):
                raise TypeError(f"check {name!r}: expected a Verdict, got {type(verdict).__name__}")
        except Exception as e:  # noqa: BLE001  (any exception is this check's failure, shown with its remedy)
            verdict = Verdict(False, remedy=f"it raised {type(e).__name__}: {e}. Run make test (or "
                                            f"python -m pytest tests) to find the cause; {SETUP_PAGE} lists fixes")
        self.verdicts[name] = verdict
        for line in verdict.lines:
            print(line)
        if verdict.passed and verdict.note:
            print(f"note: {verdict.note}")
        if not verdict.passed:
            print(f"RED   {name}: {verdict.remedy}")

    @property
    def red(self) -> list[str]:
        return [name for name, v in self.verdicts.items() if not v.passed]

    def summary(self) -> str:
        """One line: how many checks passed, and all green only when every registered check passed."""
        if not self.verdicts:
            return "setup check: no check ran"
        n, red = len(self.verdicts), self.red
        return (f"setup check: {n - len(red)} of {n} checks passed ({', '.join(self.verdicts)})"
                + (": all green, ready for the workshop" if not red else f"; red: {', '.join(red)}"))

    def remedies(self) -> list[str]:
        return [f"RED   {name}: {v.remedy}" for name, v in self.verdicts.items() if not v.passed]

    def notes(self) -> list[str]:
        return [f"note  {name}: {v.note}" for name, v in self.verdicts.items() if v.passed and v.note]


def platform_name(sys_platform: str | None = None) -> str:
    """``macOS``, ``Windows`` or ``Linux`` (anything else by its ``sys.platform``)."""
    sys_platform = sys.platform if sys_platform is None else sys_platform
    return {"darwin": "macOS", "win32": "Windows", "linux": "Linux"}.get(sys_platform, sys_platform)


def locked() -> bool:
    """Whether this environment is meant to match the lock (everywhere but ``make test-latest``)."""
    return os.environ.get(UNLOCKED_ENV) != "1"


def lock_path(has_gpu: bool | None = None, sys_platform: str | None = None, machine: str | None = None) -> Path:
    """The lock this machine installs from, as the Makefile picks it: on Linux requirements/gpu.txt with a GPU,
    else cpu.txt; macos-arm64.txt on Apple silicon; windows-amd64.txt on Windows. An Intel Mac has none."""
    sys_platform = sys.platform if sys_platform is None else sys_platform
    machine = (platform.machine() if machine is None else machine).lower()
    if sys_platform == "darwin":
        if machine != "arm64":
            raise LookupError(f"no lock for an Intel Mac ({machine}): PyTorch publishes no torch 2.13 for it; "
                              f"{SETUP_PAGE} says what to use instead")
        name = "macos-arm64"
    elif sys_platform == "win32":
        name = "windows-amd64"
    else:
        if has_gpu is None:
            from mla_edu.device import HAS_CUDA

            has_gpu = HAS_CUDA
        name = "gpu" if has_gpu else "cpu"
    return REPO_ROOT / "requirements" / f"{name}.txt"


def read_lock(path: str | Path) -> dict[str, str]:
    """``{normalized name: version}`` of every ``name==version`` line of a pip lock file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no lock at {path}: expected requirements/cpu.txt or gpu.txt from make lock")
    pins = {}
    for line in path.read_text().splitlines():
        m = _PIN.match(line.strip())
        if m:
            pins[_normalize(m.group(1))] = m.group(2)
    if not pins:
        raise ValueError(f"{path}: expected 'name==version' lines, found none")
    return pins


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions() -> dict[str, str]:
    """``{normalized name: version}`` of this environment's distributions, the first of each name on ``sys.path``
    (the one ``import`` loads): importing setuptools appends its ``_vendor`` folder to ``sys.path``, whose
    older copies (importlib-metadata, packaging, zipp) must not count as installed."""
    found = {}
    for d in metadata.distributions():
        name = d.metadata["Name"]
        if name:
            found.setdefault(_normalize(name), d.version)
    return found


def lock_mismatches(path: str | Path | None = None, installed: dict[str, str] | None = None) -> list[tuple]:
    """``[(name, locked, installed or None)]`` for each locked package not installed at its locked version.

    ``installed``: ``{name: version}`` (default: this environment's distributions). A local version label
    counts as the same release only where the lock has one too (``torch==2.13.0+cpu``)."""
    pins = read_lock(path or lock_path())
    if installed is None:
        installed = installed_versions()
    have = {_normalize(k): v for k, v in installed.items()}
    return sorted((name, want, have.get(name)) for name, want in pins.items() if have.get(name) != want)


def weights_ok(variant: str | Path = "tiny") -> tuple[bool, str]:
    """``(ok, sha256)``: the shipped weights' and config's digests against their manifest (what
    ``load_pretrained`` checks); the message of the refusal instead of the digest when they differ."""
    from mla_edu.model import VARIANTS, load_manifest, load_pretrained

    if variant not in VARIANTS and not (isinstance(variant, (str, Path)) and Path(variant).is_dir()):
        raise ValueError(f"variant: expected one of {sorted(VARIANTS)} or a weights directory, got {variant!r}")
    try:
        load_pretrained(variant)
    except ValueError as e:
        return False, str(e)
    return True, load_manifest(VARIANTS.get(variant, variant))["sha256"]


def smoke_run(num_questions: int = SMOKE_QUESTIONS) -> dict:
    """A few seconds of the real stack: the shipped model answers ``num_questions`` questions through the
    mini engine with CUDA graphs (emulated on a CPU), once with the pre-fix cutlass_mla backend and once with
    the merged fix. Returns seconds, both accuracies and the device."""
    from mla_edu.case_study.accuracy import run_bench
    from mla_edu.model import load_pretrained
    from mla_edu.serving import MERGED_FIX, PRE_FIX
    from mla_edu.util import is_int

    if not is_int(num_questions) or num_questions < 2:
        raise ValueError(f"num_questions: expected an int >= 2, got {num_questions!r}")
    t0 = time.perf_counter()
    model = load_pretrained()
    runs = {name: run_bench(model, num_questions=num_questions, parallel=num_questions, defects=defects,
                            attention_backend="cutlass_mla", cuda_graph_bs=(num_questions,))
            for name, defects in (("pre_fix", PRE_FIX), ("fixed", MERGED_FIX))}
    return {"seconds": time.perf_counter() - t0, "device": runs["fixed"]["device"],
            **{f"{name}_accuracy": r["accuracy"] for name, r in runs.items()}}


def load_timings(path: str | Path = TIMINGS_JSON) -> dict:
    """The committed table of ``python -m tools.notebook_timings``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no timings at {path}: run python -m tools.notebook_timings")
    return json.loads(path.read_text())


def expected_run_times(smoke_seconds: float, timings: dict | None = None) -> dict[str, float]:
    """``{notebook: Run All seconds expected here}``: the committed Run All times scaled by how much slower
    (or faster) this machine ran the smoke run than the machine that measured them."""
    if not isinstance(smoke_seconds, (int, float)) or not smoke_seconds > 0:
        raise ValueError(f"smoke_seconds: expected a positive number, got {smoke_seconds!r}")
    timings = load_timings() if timings is None else timings
    reference = timings.get("reference_smoke_s")
    if not isinstance(reference, (int, float)) or not reference > 0:
        raise ValueError(f"timings: expected a positive 'reference_smoke_s', got {reference!r} "
                         "(rerun python -m tools.notebook_timings after executing notebook 00)")
    factor = smoke_seconds / reference
    return {name: nb["run_all_s"] * factor for name, nb in timings["notebooks"].items()}


# ---- the checks of notebook 00: each returns a Verdict; Report.run calls them -----------------------------
RESTART_KERNEL = "restart the kernel (Kernel > Restart Kernel)"


def pip_command(names, pins: dict[str, str] | None = None, reinstall: bool = False,
                then: str = RESTART_KERNEL) -> str:
    """The one ``%pip`` line (run in a notebook cell, it installs into this kernel's environment) that puts
    ``names`` at their pinned versions (``pins``: normalized names), then what to restart."""
    pins = pins or {}
    specs = " ".join(f'"{n}=={pins[_normalize(n)]}"' if _normalize(n) in pins else f'"{n}"' for n in names)
    index = f" --extra-index-url {TORCH_CPU_INDEX}" if any("+cpu" in pins.get(_normalize(n), "") for n in names) else ""
    command = f"%pip install {'--force-reinstall ' if reinstall else ''}{specs}{index}"
    return f"{command}, then {then}" if then else command


def _lock_pins() -> dict[str, str]:
    """This platform's pins, or none where it has no lock (an Intel Mac)."""
    try:
        return read_lock(lock_path())
    except LookupError:
        return {}


def learner_packages(dist: str = "mla-edu") -> set[str]:
    """The normalized names of what ``import mla_edu`` and the notebooks load: this package's requirements
    (not its dev, lab, book or gpu extras) and theirs, with the environment markers of this machine."""
    from packaging.requirements import Requirement

    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        raise LookupError(f"{dist} is not installed in this environment (make installs it with uv pip install "
                          f"--no-deps -e .): this is not the project's kernel") from None
    seen, todo = set(), [dist]
    while todo:
        try:
            requires = metadata.requires(todo.pop()) or []
        except metadata.PackageNotFoundError:  # missing: the versions check names it
            continue
        for line in requires:
            req = Requirement(line)
            name = _normalize(req.name)
            if (req.marker is None or req.marker.evaluate({"extra": ""})) and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def notebook_checkout(notebook_dir: str | Path) -> Path | None:
    """The checkout a notebook folder lies in (the nearest folder above it with ``pyproject.toml`` and ``mla_edu/``),
    or None for notebooks copied out of any checkout (the kernel's own mla_edu is then the only one in play)."""
    for folder in Path(notebook_dir).resolve().parents:
        if (folder / "pyproject.toml").is_file() and (folder / "mla_edu").is_dir():
            return folder
    return None


def shown_path(path: str | Path, checkout: Path | None) -> str:
    """``path`` relative to ``checkout`` when it lies inside it (``mla_edu``, ``.venv/bin/python``: the same on
    every machine), else absolute: an import from another checkout then shows where it came from."""
    path = Path(path)
    if checkout is not None:
        try:
            return path.relative_to(checkout).as_posix()
        except ValueError:
            pass
    return str(path)


def check_kernel(notebook_dir: str | Path | None = None, python: tuple[int, int] | None = None) -> Verdict:
    """This kernel runs the project's environment: its mla_edu is the notebook's checkout, its Python the
    locks' (the cell before it has already stopped a kernel that cannot import mla_edu at all)."""
    notebook_dir = Path.cwd() if notebook_dir is None else Path(notebook_dir)
    python = tuple(sys.version_info[:2]) if python is None else tuple(python)
    checkout = notebook_checkout(notebook_dir)
    lines = (f"kernel: Python {'.'.join(map(str, python))} ({shown_path(sys.executable, checkout)}), mla_edu from "
             f"{shown_path(REPO_ROOT / 'mla_edu', checkout)}",)
    if checkout is not None and checkout != REPO_ROOT.resolve():
        return Verdict(False, lines, remedy=f"wrong kernel: it imports mla_edu from {REPO_ROOT}, not from this "
                       f"notebook's checkout {checkout}. Start JupyterLab from {checkout} with .venv/bin/jupyter lab "
                       f"(Windows: .venv\\Scripts\\jupyter lab), or pick that .venv's Python as the kernel")
    if locked() and python != LOCK_PYTHON:
        want = ".".join(map(str, LOCK_PYTHON))
        return Verdict(False, lines, remedy=f"wrong kernel: Python {'.'.join(map(str, python))}; the locks are "
                       f"for Python {want}. Rebuild the venv with it: make clean-venv && make PYTHON=python{want} "
                       f".venv/.ready ({SETUP_PAGE}), then pick .venv's Python as the kernel")
    return Verdict(True, lines)


def check_versions(lock: str | Path | None = None, installed: dict[str, str] | None = None,
                   learner: set[str] | None = None) -> Verdict:
    """The packages a learner imports (``learner_packages``), not the dev and book tools, at this platform's
    lock's versions. A missing Triton or widget package is left to its own check."""
    if not locked():
        return Verdict(True, ("versions not compared",), note="make test-latest: the newest versions, on purpose")
    try:
        lock = Path(lock) if lock is not None else lock_path()
    except LookupError as e:
        return Verdict(False, remedy=str(e))
    pins = read_lock(lock)
    learner = learner_packages() if learner is None else {_normalize(n) for n in learner}
    compared = sorted(learner & set(pins))
    if installed is None:
        installed = installed_versions()
    have = {_normalize(k): v for k, v in installed.items()}
    wrong = [(n, pins[n], have.get(n)) for n in compared
             if have.get(n) != pins[n] and not (have.get(n) is None and n in OWN_CHECK)]
    shown = lock.relative_to(REPO_ROOT) if lock.is_relative_to(REPO_ROOT) else lock
    lines = (f"lock {shown}: {len(pins)} packages pinned; the {len(compared)} that the notebooks import: "
             f"{len(wrong)} not at their pinned version",
             *(f"  {n}: locked {want}, installed {got or 'missing'}" for n, want, got in wrong))
    if wrong:
        return Verdict(False, lines, remedy=pip_command([n for n, _, _ in wrong], pins))
    return Verdict(True, lines)


def check_triton(sys_platform: str | None = None) -> Verdict:
    """Triton where it is installed: it imports, runs in its interpreter without a GPU, and its page-table
    fill equals torch's. Where it is not (no wheel on macOS and Windows), a pass with a note: every notebook
    has the torch kernel."""
    where = platform_name(sys_platform)
    pins = _lock_pins()
    try:
        triton = importlib.import_module("triton")
    except ModuleNotFoundError as e:
        if e.name != "triton":
            raise
        if where != "Linux":
            return Verdict(True, note=f"Triton: not available on {where}, notebooks use the torch kernel")
        return Verdict(True, note="Triton: not installed, notebooks use the torch kernel ("
                       + pip_command(["triton"], pins, then="") + " adds the Triton kernels)")
    except Exception as e:  # noqa: BLE001  (a broken install raises anything at import)
        return Verdict(False, remedy=f"Triton is installed but does not import ({type(e).__name__}: {e}): "
                       + pip_command(["triton"], pins, reinstall=True))
    from mla_edu.device import HAS_CUDA

    interpreter = os.environ.get("TRITON_INTERPRET") == "1"
    lines = [f"Triton {triton.__version__}: {'interpreter (CPU)' if interpreter else 'compiled for the GPU'}"]
    if not HAS_CUDA and not interpreter:
        return Verdict(False, tuple(lines), remedy="without a GPU Triton needs its interpreter: restart the kernel "
                       "and import mla_edu before anything imports triton (it sets TRITON_INTERPRET=1)")
    import torch

    from mla_edu.kvcache import fill_page_table
    from mla_edu.kvcache.plots import page_table_scenario

    device = "cuda" if HAS_CUDA else "cpu"
    scenario = page_table_scenario()
    tables = {}
    for impl in ("torch", "triton"):
        table = torch.full_like(scenario["buf"][:4], -1, device=device)
        fill_page_table(scenario["req_to_token"].to(device), scenario["req_pool_indices"].to(device),
                        scenario["seq_lens"].to(device), table, scenario["page_size"], impl=impl)
        tables[impl] = table.cpu()
    same = torch.equal(tables["torch"], tables["triton"])
    lines.append(f"Triton's page-table fill equals torch's: {same}")
    if not same:
        return Verdict(False, tuple(lines), remedy="Triton's kernel disagrees with torch's: "
                       + pip_command(["triton"], pins, reinstall=True))
    return Verdict(True, tuple(lines))


def _tiny_png() -> bytes:
    """A small matplotlib figure as PNG bytes, drawn off screen."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1), dpi=50)
    FigureCanvasAgg(fig)
    fig.add_subplot().plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def check_widgets(installed: dict[str, str] | None = None) -> Verdict:
    """The widgets of notebook 08's panel: ipywidgets in the kernel, jupyterlab_widgets (JupyterLab's side, without
    which the panel shows no figure), and one Output widget displayed with a figure and read back."""
    import base64

    from IPython.display import Image, display

    pins = _lock_pins()
    try:
        import ipywidgets
    except ModuleNotFoundError as e:
        if e.name != "ipywidgets":
            raise
        return Verdict(False, remedy="ipywidgets is missing (notebook 08's panel is made of widgets): "
                       + pip_command(["ipywidgets"], pins))
    if installed is None:
        try:
            installed = {"jupyterlab-widgets": metadata.version("jupyterlab_widgets")}
        except metadata.PackageNotFoundError:
            installed = {}
    have = {_normalize(k): v for k, v in installed.items()}
    if "jupyterlab-widgets" not in have:
        return Verdict(False, remedy="jupyterlab_widgets is missing, so JupyterLab draws no widget (the panel "
                       "shows no figure): " + pip_command(["jupyterlab_widgets"], pins,
                                                          then="restart JupyterLab and reload the page"))
    png = _tiny_png()
    out = ipywidgets.Output(layout={"border": "1px solid gray"})
    out.append_display_data(Image(data=png))
    display(out)
    shown = [o for o in out.outputs if "image/png" in o.get("data", {})]
    read_back = len(shown) == 1 and base64.b64decode(shown[0]["data"]["image/png"]) == png
    lines = (f"ipywidgets {ipywidgets.__version__}, jupyterlab_widgets {have['jupyterlab-widgets']}: "
             f"an Output widget with a figure, read back from the widget: {read_back}",)
    if not read_back:
        return Verdict(False, lines, remedy="the widget did not keep its figure: " + pip_command(
            ["ipywidgets", "jupyterlab_widgets"], pins, reinstall=True))
    return Verdict(True, lines)


def check_weights(variant: str | Path = "tiny") -> Verdict:
    """The shipped weights and config against their manifest's sha256 digests."""
    ok, digest = weights_ok(variant)
    lines = (f"weights and config match the manifest: {ok}", f"sha256 {digest}" if ok else digest)
    if not ok:
        return Verdict(False, lines, remedy="the shipped weights changed: restore them, in a clone from git "
                       "(git checkout -- mla_edu/model/weights mla_edu/model/weights_yarn), in the workshop's copy "
                       "from its archive (tar xzf mla-edu-attendee.tar.gz mla-edu/mla_edu/model)")
    return Verdict(True, lines)


def check_smoke(result: dict, num_questions: int = SMOKE_QUESTIONS) -> Verdict:
    """``smoke_run`` into ``result`` (which the timings check reads): the fix answers (8 of 8 on a CPU; bf16 on
    a GPU may miss one), the pre-fix backend far fewer."""
    result.update(smoke_run(num_questions))
    pre, fixed = result["pre_fix_accuracy"], result["fixed_accuracy"]
    lines = (f"accuracy on {num_questions} questions: pre-fix {pre:.3f}, fixed {fixed:.3f}",)
    if not (fixed >= 0.75 and pre <= fixed - 0.5):
        return Verdict(False, lines, remedy="the stack computes other answers than on the project's machines: "
                       "run make test (or python -m pytest tests) and report what fails")
    return Verdict(True, lines)


def timings_line(name: str, reference_s: float, here_s: float) -> str:
    """One notebook's line of the timings check (``tests/test_setup_check.py`` reads it back from notebook 00)."""
    return f"  {name[:-6]:40s} Run All {reference_s:5.1f} s on the reference machine, about {here_s:4.0f} s here"


def check_timings(smoke_seconds: float, timings: dict | None = None) -> Verdict:
    """Each notebook's expected Run All time here, for every notebook of the repository: the reference machine's
    (``run_all_s``, quoted as the table has it) and that scaled by the smoke runs."""
    timings = load_timings() if timings is None else timings
    expected = expected_run_times(smoke_seconds, timings)
    lines = (f"this machine ran the smoke run in {smoke_seconds:.1f} s, the reference machine in "
             f"{timings['reference_smoke_s']:.1f} s",
             *(timings_line(name, timings["notebooks"][name]["run_all_s"], seconds)
               for name, seconds in expected.items()))
    missing = sorted({p.name for p in REPO_ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")} - set(expected))
    if missing:
        return Verdict(False, lines, remedy=f"results/notebook_timings.json lacks {missing}: "
                       "run python -m tools.notebook_timings")
    return Verdict(True, lines)
