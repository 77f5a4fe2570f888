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


# restructured separately (stage-1 kernels behind one registry); it joins the rule when that lands
INIT_EXEMPT = {"mla_edu/kernels/sm90/__init__.py"}
INITS = [p for p in sorted(ROOT.glob("mla_edu/**/__init__.py")) if p.relative_to(ROOT).as_posix() not in INIT_EXEMPT]


def _logic(tree: ast.Module) -> list[str]:
    """Top-level statements other than the docstring, imports and dunder assignments (``__all__``, ``__version__``)."""
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) else tree.body
    return [f"line {n.lineno}: {ast.unparse(n).splitlines()[0]}" for n in body
            if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) and t.id.startswith("__")
                                                       for t in n.targets))]


def test_the_scan_finds_logic():
    src = '"""Doc."""\nimport os\nfrom a import b\n__all__ = ["b"]\nX = 1\ndef f():\n    pass\n'
    assert _logic(ast.parse(src)) == ["line 5: X = 1", "line 6: def f():"]


@pytest.mark.parametrize("path", INITS, ids=lambda p: str(p.relative_to(ROOT)))
def test_package_inits_only_re_export(path):
    logic = _logic(ast.parse(path.read_text(), filename=str(path)))
    assert not logic, f"{path.relative_to(ROOT)} holds logic; move it to a module named for what it holds: {logic}"
