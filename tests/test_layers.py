"""The layers of SPEC.md, enforced: each imports only from the layers above it, and the notebook's
only door is the tools layer."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dsh_terminal_magics"
#: What each layer may import from this package (the ground floor is open to all).
GROUND = {"errors", "owners", "vocabulary", "ansi", "asciicast"}
ALLOWED = {
    "mechanism": GROUND | {"mechanism"},
    "jobs": GROUND | {"mechanism", "jobs"},
    "tools": GROUND | {"mechanism", "jobs", "tools"},
    "notebook": GROUND | {"tools", "notebook", "mcp"},
    "mcp": GROUND | {"tools", "mcp"},
    "integrations": GROUND | {"tools", "integrations"},
}


def package_imports(path: Path) -> set[str]:
    """Top-level package modules a file imports (``..mechanism.keys`` -> ``mechanism``)."""
    layer_depth = len(path.relative_to(PACKAGE).parts) - 1
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] == "dsh_terminal_magics" and len(parts) > 1:
                    found.add(parts[1])
            elif node.level == layer_depth + 1:
                found.add((node.module or "").split(".")[0] or node.names[0].name)
            elif node.level <= layer_depth:
                found.add(path.relative_to(PACKAGE).parts[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "dsh_terminal_magics" and len(parts) > 1:
                    found.add(parts[1])
    return found


def layer_of(path: Path) -> str:
    first = path.relative_to(PACKAGE).parts[0]
    return first.removesuffix(".py")


FILES = [p for p in PACKAGE.rglob("*.py") if layer_of(p) in ALLOWED]


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(PACKAGE)) for p in FILES])
def test_each_module_imports_only_from_the_layers_above_it(path):
    layer = layer_of(path)
    assert package_imports(path) <= ALLOWED[layer], (layer, package_imports(path) - ALLOWED[layer])


def test_the_notebook_imports_nothing_from_the_mechanism():
    offenders = [str(p.relative_to(PACKAGE)) for p in (PACKAGE / "notebook").rglob("*.py")
                 if "mechanism" in package_imports(p)]
    assert offenders == []
    assert len(list((PACKAGE / "notebook").rglob("*.py"))) >= 8  # the check saw the whole layer


def test_the_checker_sees_a_side_door(tmp_path):
    """The import checker itself can fail: a relative import of the mechanism is reported."""
    fake = PACKAGE / "notebook" / "_side_door_probe.py"
    fake.write_text("from ..mechanism.session import Session\nfrom ..tools import TerminalTools\n")
    try:
        assert package_imports(fake) == {"mechanism", "tools"}
    finally:
        fake.unlink()


def test_the_tools_layer_never_touches_a_pty():
    for path in (PACKAGE / "tools").rglob("*.py"):
        source = path.read_text()
        assert "ptyprocess" not in source and "openpty" not in source and "os.read(" not in source, path
