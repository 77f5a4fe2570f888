"""The two ways to install list the same packages, and CI runs the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    pyproject = (ROOT / "pyproject.toml").read_text()  # (no tomllib: Python 3.10 is supported)
    blocks = re.findall(r"^(?:dependencies|dev) = \[(.*?)\]", pyproject, flags=re.M | re.S)
    assert len(blocks) == 2, "pyproject.toml: expected a dependencies list and a dev extra"
    wanted = {_name(r) for block in blocks for r in re.findall(r'"([^"]+)"', block)}
    assert {"torch", "triton", "nbval", "transformers"} <= wanted
    wanted = {"pytorch" if n == "torch" else n for n in wanted}
    text = (ROOT / "environment.yml").read_text()
    listed = {_name(m) for m in re.findall(r"^\s*-\s+([A-Za-z][\w.\-]*[^\n]*)$", text, flags=re.M)}
    missing = wanted - listed
    assert not missing, f"environment.yml lacks {sorted(missing)} (listed in pyproject.toml)"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci
    assert "make test" in readme and "make repro" in readme
