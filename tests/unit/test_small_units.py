"""The house's size rule, read from the sources of the project's packages: no class past 250
lines (a class that long has a second duty: split it) and no function past 80 lines. The
offenders are named with their file, line and length."""
from __future__ import annotations

import ast

from tests.unit.test_layering import PACKAGES, ROOT, modules

MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 80


def _lengths(kinds: tuple[type, ...]) -> list[tuple[int, str]]:
    found = []
    for path in modules(ROOT, PACKAGES).values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, kinds):
                length = node.end_lineno - node.lineno + 1
                found.append((length, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return found


def test_no_class_is_past_250_lines():
    classes = _lengths((ast.ClassDef,))
    assert len(classes) > 100  # the walk found the packages' classes
    assert [c for c in classes if c[0] > MAX_CLASS_LINES] == []


def test_no_function_is_past_80_lines():
    functions = _lengths((ast.FunctionDef, ast.AsyncFunctionDef))
    assert len(functions) > 1000
    assert [f for f in functions if f[0] > MAX_FUNCTION_LINES] == []
