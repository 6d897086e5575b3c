"""Names the suite shares are defined once, in the lowest package that needs them, and every
other module imports them from there (not through a module that re-exports them)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mig", "predictor", "packer", "store", "gpus", "simjobs", "simulator", "slurm_plugin")

HOMES = {
    "GresItem": "packer.gres",
    "ContentionVerdict": "packer.contention",
    "throughput_loss": "packer.contention",
}


def sources() -> dict[str, ast.Module]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            mod = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            out[mod] = ast.parse(path.read_text(encoding="utf-8"))
    return out


SOURCES = sources()


def definitions(name: str) -> list[str]:
    """The modules that define ``name`` at their top level (a class, a function or an assignment)."""
    found = []
    for mod, tree in SOURCES.items():
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found.append(mod)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found.append(mod)
    return found


def importers(name: str) -> dict[str, str]:
    """module -> the module it imports ``name`` from."""
    return {mod: node.module for mod, tree in SOURCES.items() for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names)}


@pytest.mark.parametrize("name", sorted(HOMES))
def test_defined_once_in_its_home(name):
    assert definitions(name) == [HOMES[name]]


@pytest.mark.parametrize("name", sorted(HOMES))
def test_imported_from_its_home(name):
    elsewhere = {mod: src for mod, src in importers(name).items() if src != HOMES[name]}
    assert not elsewhere, f"import {name} from {HOMES[name]}"
    assert importers(name), f"{name} is used outside {HOMES[name]}"


def test_the_scan_sees_a_second_definition_and_a_relayed_import():
    SOURCES["fake.mod"] = ast.parse("class GresItem:\n    pass\nfrom slurm_plugin.slurm.model import GresItem\n")
    try:
        assert definitions("GresItem") == ["packer.gres", "fake.mod"]
        assert importers("GresItem")["fake.mod"] == "slurm_plugin.slurm.model"
    finally:
        del SOURCES["fake.mod"]
