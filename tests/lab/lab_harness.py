"""What the browser tests share: waiting on a page's state, and JupyterLab's notebook panels found by path.

Headless Chromium may never give the page focus, and JupyterLab sets ``app.shell.currentWidget`` from focus, so
nothing here reads ``currentWidget`` to find a notebook: the panel is looked up by its path among the main area's
widgets, and commands name it (``widgetId``), which also activates it. ``conftest.browser`` turns on Chromium's
focus emulation besides. A wait that times out says what it waited for and the last value of each condition.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

# Defines panel(path): the notebook panel open at ``path`` (relative to the server's root) in the main area, or null.
PANEL_JS = """
const panel = path => {
  const app = window.jupyterapp;
  if (!app) return null;
  for (const w of app.shell.widgets('main')) if (w.context && w.context.path === path) return w;
  return null;
};
"""

# arguments[0]: a notebook's path. Each condition of "open, its kernel started and idle", and (for a reader of a
# timeout) where JupyterLab's focus is.
NOTEBOOK_STATE_JS = PANEL_JS + """
const app = window.jupyterapp, w = panel(arguments[0]), cur = app ? app.shell.currentWidget : null;
const session = w && w.sessionContext ? w.sessionContext.session : null;
return {jupyterapp: !!app, panel_open: !!w, context_ready: !!(w && w.context.isReady),
        kernel: session && session.kernel ? session.kernel.status : null,
        current_widget: cur ? (cur.context ? cur.context.path : cur.id) : null, has_focus: document.hasFocus()};
"""


def notebook_ready(state: dict) -> bool:
    """``NOTEBOOK_STATE_JS``'s value says the notebook is open and its kernel idle (focus is not needed)."""
    return state["jupyterapp"] and state["panel_open"] and state["context_ready"] and state["kernel"] == "idle"


def wait_for(driver, what: str, ready, script: str, *args, timeout: float, poll: float = 0.5):
    """Runs ``script`` with ``args`` in the page until ``ready`` holds for its value, and returns that value. After
    ``timeout`` seconds raises TimeoutError naming ``what`` and the script's last value (best a dict, one entry per
    condition)."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script, *args)
        if ready(value):
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}; the last state: {json.dumps(value, default=str)}")
        time.sleep(poll)


def open_notebook(driver, base: str, token: str, path: str, timeout: float = 180) -> dict:
    """Opens ``path`` in JupyterLab (a fresh workspace), waits until it is open with its kernel idle, and activates
    it. Returns the ready state."""
    driver.get(f"{base}/lab/tree/{path}?token={token}&reset")
    state = wait_for(driver, f"{path} open in JupyterLab with its kernel idle", notebook_ready, NOTEBOOK_STATE_JS,
                     path, timeout=timeout)
    driver.execute_script(PANEL_JS + "window.jupyterapp.shell.activateById(panel(arguments[0]).id);", path)
    return state


def chromium(user_data_dir: Path, window: str, performance_log: bool = False):
    """Headless Chromium (Debian's package) through its chromedriver, with no background traffic (this machine's
    network is closed); ``performance_log`` records DevTools events, every network request among them."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver_path:
        raise RuntimeError("make test-lab needs Debian's chromium and chromium-driver "
                    "(apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--window-size={window}", f"--user-data-dir={user_data_dir}"):
        opts.add_argument(flag)
    if performance_log:
        opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=opts)
