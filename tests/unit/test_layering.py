"""The import graph of the project's packages, read from their sources: no arrow back up the
floors of docs/architecture.md, no cycle between top-level packages, and no import cycle
between modules but the known ones listed below (each must still exist: a cycle removed is
taken off the list).

Every import counts: at module level, inside functions and under ``if TYPE_CHECKING`` (a
lazy or type-only import still ties the two modules together).
"""
from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# the floors, lowest first (docs/architecture.md): the pure cores, the packer's decisions on
# them, the adapters (store, GPU backends, simulated jobs), the simulator that drives the
# cores, and the Slurm plugin suite on top. A package imports its own floor or lower ones.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"mig", "predictor"}),
    frozenset({"packer"}),
    frozenset({"store", "gpus", "simjobs"}),
    frozenset({"simulator"}),
    frozenset({"slurm_plugin"}),
)
PACKAGES = frozenset().union(*FLOORS)

# module cycles that are known and still to be broken (sorted members of each)
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in sorted(packages) for p in sorted((root / pkg).rglob("*.py"))}


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Every dotted name ``module`` imports (``from a import b``: both ``a`` and ``a.b``),
    relative imports made absolute."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[:len(here) - (node.level - 1)]
                base = ".".join([*here, *([node.module] if node.module else [])])
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    return names


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports (a name resolved to its longest known module)."""
    mods = modules(root, packages)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        found = {resolve(n) for n in imported_names(path.read_text(encoding="utf-8"), mod, path.name == "__init__.py")}
        graph[mod] = {m for m in found if m is not None and m != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected parts of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.add(tuple(sorted(part)))
    return found


def package_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """package -> package it imports -> the module edges (``a.x -> b.y``) that make the arrow."""
    out: dict[str, dict[str, list[str]]] = {}
    for mod, targets in graph.items():
        for target in targets:
            a, b = mod.split(".")[0], target.split(".")[0]
            if a != b:
                out.setdefault(a, {}).setdefault(b, []).append(f"{mod} -> {target}")
    return out


def floor_of(package: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if package in floor)


def arrows_up(graph: dict[str, set[str]]) -> list[str]:
    return sorted(edge for a, targets in package_graph(graph).items() for b, edges in targets.items()
                  if floor_of(b) > floor_of(a) for edge in edges)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_reader_sees_lazy_type_only_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\nx = 1\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n    import pkg.c\n")
    (pkg / "c.py").write_text("import json\n")
    g = import_graph(tmp_path, ["pkg"])
    assert g == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a", "pkg.c"}, "pkg.c": set()}
    assert cycles(g) == {("pkg.a", "pkg.b")}


def test_an_arrow_back_up_is_found():
    g = {"packer.rules": {"store.db"}, "store.db": {"packer.decision"}, "packer.decision": set()}
    assert arrows_up(g) == ["packer.rules -> store.db"]
    assert package_graph(g) == {"packer": {"store": ["packer.rules -> store.db"]},
                                "store": {"packer": ["store.db -> packer.decision"]}}


def test_every_package_is_on_a_floor():
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert on_disk <= PACKAGES | {"tests"}, f"{sorted(on_disk - PACKAGES - {'tests'})}: put it on a floor in FLOORS"


def test_no_import_goes_up_a_floor(graph):
    assert arrows_up(graph) == []


def test_no_cycle_between_packages(graph):
    packages = {a: set(targets) for a, targets in package_graph(graph).items()}
    assert cycles(packages) == set()


def test_no_module_cycle_but_the_known_ones(graph):
    found = cycles(graph)
    assert found - KNOWN_CYCLES == set(), "a new import cycle: give one side what it needs as an argument"
    assert KNOWN_CYCLES - found == set(), "a known cycle is gone: take it off KNOWN_CYCLES"
