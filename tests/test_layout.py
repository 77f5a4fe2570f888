"""The library, the tools and the notebooks use one another's public names only."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("mla_edu/**/*.py"), *ROOT.glob("tools/*.py"), *ROOT.glob("notebooks/*.py")])
OURS = ("mla_edu", "tools")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(tree: ast.AST) -> list[str]:
    """Imports of a private module or name of ours, and ``module._name`` on a module of ours."""
    found, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS:
            found += [f"from {node.module} import ..." for part in node.module.split(".") if _private(part)]
            found += [f"from {node.module} import {a.name}" for a in node.names if _private(a.name)]
            bound |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OURS:
                    found += [f"import {a.name}" for part in a.name.split(".") if _private(part)]
                    bound.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


def test_the_scan_finds_private_uses():
    src = "from mla_edu import _env\nfrom mla_edu._cli import device\nimport mla_edu.kvcache._x\n" \
          "from mla_edu.graphs import panel\npanel._record(1)\nmla_edu.util._f\nself._ok = 1\n"
    assert len(_private_uses(ast.parse(src))) == 5


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_of_another_module(path):
    uses = _private_uses(ast.parse(path.read_text(), filename=str(path)))
    assert not uses, f"{path.relative_to(ROOT)} reaches private names of our modules: {uses}"
