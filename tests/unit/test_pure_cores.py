"""The pure cores (packer/, predictor/, mig/) do no I/O: no SQLite, subprocess, socket, NVML,
no adapter package, and no file access but what is listed below with its reason.

Every import is checked, at module level and inside functions (a lazy import is still an
edge to the outside world); file access is found as calls of ``open`` and of the path
methods that read, write or list files.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_PACKAGES = ("packer", "predictor", "mig")

# top-level modules that talk to the outside world, and the adapter packages
FORBIDDEN_IMPORTS = {
    "sqlite3", "sqlite_utils", "subprocess", "socket", "socketserver", "pynvml", "fcntl", "ctypes",
    "shutil", "tempfile", "os", "urllib", "http", "multiprocessing", "signal", "torch",
    "slurm_plugin", "gpus", "store", "simulator", "simjobs",
}
FILE_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "iterdir", "glob", "rglob",
              "mkdir", "unlink", "touch"}

# the file access the cores keep, and why (each entry must still be used: a stale one fails)
ALLOWED_FILE_CALLS = {
    "mig/catalog.py": {"iterdir", "read_text"},      # the catalogue data files, read at import
    "predictor/series.py": {"read_text", "write_text"},  # offline: a series file named by the caller
    "predictor/bench.py": {"glob", "read_text"},     # offline: the benchmark's folder of series
}


def pure_modules() -> list[Path]:
    return sorted(p for pkg in PURE_PACKAGES for p in (ROOT / pkg).glob("*.py"))


def edges(source: str) -> tuple[set[str], set[str]]:
    """(forbidden top-level modules imported, file-access calls made) in one module's source."""
    tree = ast.parse(source)
    imported, calls = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in FILE_CALLS:
                calls.add(name)
    return imported & FORBIDDEN_IMPORTS, calls


def test_the_checker_sees_imports_lazy_imports_and_file_access():
    src = ("import sqlite3\nfrom store.db import Store\n"
           "def f(p):\n    import subprocess\n    from gpus.sim import backend\n"
           "    open(p)\n    return p.read_text()\n")
    assert edges(src) == ({"sqlite3", "store", "subprocess", "gpus"}, {"open", "read_text"})
    assert edges("import json\nfrom mig.fsm import PartitionSpace\nx = s.replace('a', 'b')\n") == (set(), set())


def test_pure_cores_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in pure_modules()}
    assert {"packer/rules.py", "mig/fsm.py", "predictor/forecast.py"} <= names


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_pure_module_has_no_io(path):
    rel = path.relative_to(ROOT).as_posix()
    imported, calls = edges(path.read_text(encoding="utf-8"))
    assert not imported, f"{rel} imports {sorted(imported)}: move that code to an adapter (gpus/, store/, slurm_plugin/)"
    allowed = ALLOWED_FILE_CALLS.get(rel, set())
    assert calls <= allowed, f"{rel} accesses files ({sorted(calls - allowed)}): take the data as an argument"
    assert allowed <= calls, f"{rel} no longer uses {sorted(allowed - calls)}: drop it from ALLOWED_FILE_CALLS"
