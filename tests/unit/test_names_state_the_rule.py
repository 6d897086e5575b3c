"""Names and comments say the rule, not where it came from: no function, class or property is
named after an issue or a patent's figure, and no comment cites a figure number."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mig", "predictor", "packer", "store", "gpus", "simjobs", "simulator", "slurm_plugin", "scripts")
ORIGIN_NAME = re.compile(r"(^|_)(issue|fig|figure)_?\d", re.I)
FIGURE = re.compile(r"\bFIG\.? *\d", re.I)


def sources() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def named_after_an_origin(source: str) -> list[str]:
    return [node.name for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and ORIGIN_NAME.search(node.name)]


def test_no_definition_is_named_after_an_issue_or_a_figure():
    found = {str(p.relative_to(ROOT)): names for p in sources() if (names := named_after_an_origin(p.read_text()))}
    assert found == {}


def test_no_code_cites_a_figure_number():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sources()
             for n, line in enumerate(p.read_text().splitlines(), 1) if FIGURE.search(line)]
    assert found == []


def test_the_scan_sees_what_it_looks_for():
    assert named_after_an_origin("def _issue12():\n    pass\nclass X:\n    @property\n    def fig4_threshold(self): ...\n"
                                 "def configure(): ...\n") == ["_issue12", "fig4_threshold"]
    assert FIGURE.search("# FIG. 4 requeues") and FIGURE.search("(FIG. 3/4 alone)") and not FIGURE.search("config 4")
