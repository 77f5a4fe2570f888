"""JupyterLab and the book, driven in headless Chromium (``make test-lab``; marker ``lab``).

A JupyterLab server from this environment on 127.0.0.1 over a copy of ``notebooks/`` (so Run All
never touches the committed notebooks), Debian's ``chromium`` driven through ``chromedriver`` by
Selenium, and a static server over the built book (``make book``).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from lab_harness import chromium

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "build" / "book"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """(base URL, token) of a JupyterLab server rooted at a copy of notebooks/."""
    home = tmp_path_factory.mktemp("lab")
    root = home / "notebooks"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns("gpu", "*.py", ".ipynb_checkpoints"))
    token = secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"), "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    log = open(home / "lab.log", "w")
    for attempt in range(3):  # a port free when asked can be taken before the server binds it (another worker's)
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", 90, proc)
        except BaseException as e:  # an interrupt too: no server left behind
            proc.kill()
            proc.wait()
            if isinstance(e, RuntimeError) and attempt < 2:
                continue  # it exited: start it again on another port
            log.close()
            if not isinstance(e, (RuntimeError, TimeoutError)):
                raise
            raise RuntimeError(f"{e}; JupyterLab's log ends:\n{(home / 'lab.log').read_text()[-3000:]}") from None
        break
    try:
        yield f"http://127.0.0.1:{port}", token
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Headless Chromium at 1600x1200, for JupyterLab and the book."""
    driver = chromium(tmp_path_factory.mktemp("chromium"), "1600,1200")
    # Headless Chromium need not give the page focus, and JupyterLab sets its current widget from focus: emulate it
    # (lab_harness finds notebooks by path besides, so that no wait depends on it).
    driver.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
    driver.set_script_timeout(600)
    # selenium's HTTP client waits 120 s for chromedriver's answer by default, under the script timeout: on a slow
    # machine notebook 07's Run All outlasted it ("Read timed out. (read timeout=120)"). Wait longer than the script
    driver.command_executor.client_config.timeout = 660
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def book_url():
    """Base URL of a static server over build/book (built by ``make book``)."""
    if not (BOOK / "index.html").exists():
        pytest.fail(f"{BOOK / 'index.html'} is missing: run make book first (make test-lab does)")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(BOOK))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


RUN_ALL_SECONDS = ROOT / "build" / "lab_run_all_seconds.json"
TIMINGS = ROOT / "results" / "notebook_timings.json"


def _workers(config=None) -> int:
    """How many pytest processes run the browser tests side by side (pytest-xdist's workers; 1 without)."""
    if config is not None:
        return len(getattr(config.option, "tx", None) or []) if getattr(config.option, "dist", "no") != "no" else 1
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


@pytest.fixture(scope="session")
def run_times():
    """Run All wall times per notebook, written to build/lab_run_all_seconds.json at the end when the Run Alls ran
    one at a time (the instructor's timings are an attendee's, who runs one notebook; make test-lab LAB_WORKERS=1)."""
    times: dict[str, float] = {}
    yield times
    if times and _workers() == 1:
        RUN_ALL_SECONDS.parent.mkdir(exist_ok=True)
        RUN_ALL_SECONDS.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


def pytest_collection_modifyitems(config, items):
    """The browser tests longest first (by the committed Run All times), the rest in their order: pytest-xdist then
    hands the long Run Alls out first, one to each worker, and the short tests fill in after."""
    here = Path(__file__).parent
    lab = [i for i, item in enumerate(items) if item.path.is_relative_to(here)]
    if not lab or not TIMINGS.is_file():
        return
    seconds = {n: v["run_all_s"] for n, v in json.loads(TIMINGS.read_text())["notebooks"].items()}

    def expected(item) -> float:
        name = getattr(item, "originalname", "")
        if name == "test_run_all_in_jupyterlab":
            return seconds.get(item.callspec.params["name"], 0.0)
        if name == "test_panel_redraws_in_jupyterlab":  # Run All, then three redraws
            return 2 * seconds.get("08_workshop_exercises.ipynb", 0.0)
        return 0.0

    ordered = sorted((items[i] for i in lab), key=expected, reverse=True)  # stable: ties keep their order
    for i, item in zip(lab, ordered):
        items[i] = item


def pytest_terminal_summary(terminalreporter, config):
    ran = any("test_run_all_in_jupyterlab" in r.nodeid for r in terminalreporter.stats.get("passed", []))
    if ran and _workers(config) > 1:
        terminalreporter.write_line(f"{RUN_ALL_SECONDS.relative_to(ROOT)} not written: {_workers(config)} workers ran "
                                    "the Run Alls side by side (make test-lab LAB_WORKERS=1 times them one at a time)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, keep a screenshot and the page's HTML in build/lab-failures/ to look at."""
    outcome = yield
    report = outcome.get_result()
    driver = item.funcargs.get("browser") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and driver is not None:
        out = ROOT / "build" / "lab-failures"
        out.mkdir(parents=True, exist_ok=True)
        stem = "".join(c if c.isalnum() else "_" for c in item.name)
        driver.save_screenshot(str(out / f"{stem}.png"))
        (out / f"{stem}.html").write_text(driver.page_source)
