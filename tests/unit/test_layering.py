"""The layers of the tree, kept by a test (as import-linter would): the contract (`tidal.api`)
imports nothing else of Tidal; the client (`tidal.kube`) only the contract; shared libraries only
the layers below them; the components (manager, agent, console) the layers below them and never
each other; the product never imports the development distribution (`tidal_dev`: lab, test
helpers). Every import counts, also those inside functions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "controllers" / "tidal"

#: package -> the packages of Tidal it may import (besides itself)
ALLOWED = {
    "tidal.api": set(),
    "tidal.cache": set(),
    "tidal.tasks": set(),
    "tidal.kube": {"tidal.api"},
    "tidal.metrics": {"tidal.api"},
    "tidal.crds": {"tidal.api"},
    "tidal.predict": {"tidal.api"},
    "tidal.manager": {"tidal.api", "tidal.kube", "tidal.metrics", "tidal.crds", "tidal.predict", "tidal.tasks"},
    "tidal.agent": {"tidal.api", "tidal.kube", "tidal.metrics", "tidal.predict", "tidal.tasks"},
    "tidal.console": {"tidal.api", "tidal.kube", "tidal.metrics", "tidal.cache", "tidal.crds"},
    # the `tidal` command dispatches to the components' own command lines
    "tidal.cli": {"tidal.manager", "tidal.predict"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PRODUCT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
            if name == "tidal":  # `from tidal import x`: the submodules named
                out += [(node.lineno, f"tidal.{alias.name}") for alias in node.names]
    return out


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def _product_files() -> list[Path]:
    return sorted(p for p in PRODUCT.rglob("*.py") if not p.name.endswith("_pb2.py"))


def test_every_product_module_belongs_to_a_layer():
    orphans = [_module_name(p) for p in _product_files()
               if _module_name(p) != "tidal" and _layer(_module_name(p)) is None]
    assert not orphans, f"modules outside every layer of tests/unit/test_layering.py: {orphans}"


def _crossings(own: str | None, imports: list[tuple[int, str]]) -> list[str]:
    """The imports of a module of layer `own` that cross the layers, one line each."""
    wrong = []
    for line, name in imports:
        if name.split(".")[0] == "tidal_dev":
            wrong.append(f"{line}: {name} (the development distribution: the runtime image does not have it)")
            continue
        if not name.startswith("tidal.") or own is None:
            continue
        target = _layer(name)
        if target != own and target not in ALLOWED[own]:
            wrong.append(f"{line}: {name} ({own} may import {sorted(ALLOWED[own]) or 'nothing else of Tidal'})")
    return wrong


@pytest.mark.parametrize("path", _product_files(), ids=lambda p: str(p.relative_to(PRODUCT)))
def test_imports_follow_the_layers(path):
    wrong = _crossings(_layer(_module_name(path)), _imports(path))
    assert not wrong, f"{path.relative_to(ROOT)} crosses a layer:\n" + "\n".join(wrong)


@pytest.mark.parametrize("own, imports, crossing", [
    ("tidal.manager", [(1, "tidal.agent.watch")], True),
    ("tidal.agent", [(1, "tidal.console.views")], True),
    ("tidal.api", [(1, "tidal.kube.client")], True),
    ("tidal.kube", [(1, "tidal.api.qos"), (2, "json")], False),
    ("tidal.console", [(1, "tidal_dev.lab.versions")], True),
    ("tidal.agent", [(1, "tidal.agent.qos"), (2, "tidal.predict.series"), (3, "tidal.api.qos")], False),
])
def test_the_check_sees_a_crossing(own, imports, crossing):
    """The check above can fail: what it would report for a few made-up imports."""
    assert bool(_crossings(own, imports)) is crossing


def test_relative_and_function_level_imports_are_seen(tmp_path, monkeypatch):
    probe = PRODUCT / "manager" / "probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (
        "def f():\n    from tidal.agent.watch import Watcher\n    from ..agent import run\n"))
    assert [name for _, name in _imports(probe)] == ["tidal.agent.watch", "tidal.agent"]
