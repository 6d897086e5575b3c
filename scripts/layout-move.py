#!/usr/bin/env python3
"""The layout move: one home each for the simulator, the simulated jobs, the GPU backends and
the store, so that packer/, predictor/ and mig/'s state machine are the pure cores.

Run from anywhere inside the checkout, on a clean tree, then review and commit the result:

    python3 scripts/layout-move.py            # move and rewrite
    python3 scripts/layout-move.py --dry-run  # say what would move and which files would change

What it does, mechanically and with no logic change:

1. ``git mv`` every path in :data:`MOVES` (old -> new). A path already moved (old gone, new
   there) is skipped, so a second run does nothing; an old path that is missing with no new
   one, or both present, stops the run before anything changes. Files that look like they
   belong to a moved group but are not listed (a new ``mig/nvml_*.py`` or ``mig/sim_*.py``,
   say) stop the run too, naming the file to add to :data:`MOVES`.
2. Creates the ``__init__.py`` of each new package (:data:`NEW_PACKAGES`).
3. Rewrites, in every tracked text file, each reference to a moved module: dotted names
   (``from packer.store import``, ``import slurm_plugin.simulator.x``, ``python3 -m ...``,
   ``"mig.sim_backend.time"`` in patches, ``:mod:`` roles, pyproject's package-data keys),
   ``from PKG import MOD`` where ``PKG.MOD`` moved (``from packer import store`` becomes
   ``from store import db as store``), and paths (``slurm_plugin/simulator/engine.py``,
   ``mig/nvml_*.py``). Matches are whole names: ``simgpu`` alone (the CLI command, the
   ``simgpu_dir`` key) is left as it is.
4. Adds the new top-level packages to pyproject.toml's package discovery, and brings
   docs/architecture.md's folder tables up to date (rows it cannot find are reported).
5. Prints what it changed, and every line that still names an old module or path.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# old path -> new path (files or folders), relative to the repository root
MOVES: list[tuple[str, str]] = [
    # the simulator and the simulated jobs: neither speaks Slurm
    ("slurm_plugin/simulator", "simulator"),
    ("slurm_plugin/simgpu/nvml", "gpus/sim/nvml"),  # the simulated GPU's libnvidia-ml
    ("slurm_plugin/simgpu", "simjobs"),             # workload, pairs, pair_speeds.json, counter_bench
    # the GPU backends: NVML and the simulated GPU, with its file-backed state
    ("mig/nvml_backend.py", "gpus/nvml/backend.py"),
    ("mig/nvml_session.py", "gpus/nvml/session.py"),
    ("mig/nvml_catalog.py", "gpus/nvml/catalog.py"),
    ("mig/nvml_instances.py", "gpus/nvml/instances.py"),
    ("mig/nvml_counters.py", "gpus/nvml/counters.py"),
    ("mig/sim_backend.py", "gpus/sim/backend.py"),
    ("mig/sim_store.py", "gpus/sim/store.py"),
    ("mig/sim_memory.py", "gpus/sim/memory.py"),
    ("mig/sim_counters.py", "gpus/sim/counters.py"),
    # memory series read from NVML, cgroups, procfs, torch: the node's side, not the forecaster
    ("predictor/sources.py", "slurm_plugin/agent/memory_sources.py"),
    # the store: SQLite tables and atomic JSON files
    ("packer/store.py", "store/db.py"),
    ("packer/curve_store.py", "store/curves.py"),
    ("packer/action_ledger.py", "store/ledger.py"),
    ("mig/jsonfile.py", "store/jsonfile.py"),
]

# moved when present (from branches that may not have landed yet); reported when absent
OPTIONAL_MOVES: list[tuple[str, str]] = [
    ("packer/slice_mirror.py", "store/slice_mirror.py"),  # the slice_journal table (branch agree)
]

# files matching these (relative to the root) must be listed in MOVES, or the run stops
MUST_MOVE_GLOBS = ["mig/nvml_*.py", "mig/sim_*.py", "slurm_plugin/simgpu/**/*.py",
                   "slurm_plugin/simulator/**/*.py"]

# globbed path references in prose
PATH_GLOBS = {"mig/nvml_*.py": "gpus/nvml/*.py", "mig/sim_*.py": "gpus/sim/*.py",
              "mig/nvml_*": "gpus/nvml/*", "mig/sim_*": "gpus/sim/*"}

NEW_PACKAGES: dict[str, str] = {
    "gpus": '"""The GPU backends behind `mig.backend.GpuBackend`: NVML on real GPUs (`gpus.nvml`) and\n'
            'the simulated GPU with its file-backed state and its libnvidia-ml (`gpus.sim`)."""\n',
    "gpus/nvml": '"""The NVML backend: MIG on real GPUs through ``pynvml`` (the only code that talks to NVML)."""\n',
    "gpus/sim": '"""The simulated GPU: MIG state, memory and counters kept in a file per node, and the\n'
                'fake ``libnvidia-ml`` (`gpus.sim.nvml`) that serves it to the real ``pynvml``."""\n',
    "store": '"""The store: the SQLite tables (`db`: history, pairs, pair speeds, events; `curves`;\n'
             '`ledger`: the action ledger) and atomic JSON files (`jsonfile`)."""\n',
}

NEW_TOP_PACKAGES = ["simulator", "simjobs", "gpus", "store"]

SELF = "scripts/layout-move.py"


def sh(root: Path, *args: str) -> str:
    return subprocess.run(args, cwd=root, check=True, capture_output=True, text=True).stdout


def dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


@dataclass
class Plan:
    root: Path
    todo: list[tuple[str, str]] = field(default_factory=list)
    done: list[tuple[str, str]] = field(default_factory=list)


def check(root: Path) -> Plan:
    plan = Plan(root)
    problems = []
    for old, new in MOVES + OPTIONAL_MOVES:
        o, n = (root / old).exists(), (root / new).exists()
        if not o and not n and (old, new) in OPTIONAL_MOVES:
            print(f"  not here (optional, skipped): {old}")
        elif o and not n:
            plan.todo.append((old, new))
        elif n and not o:
            plan.done.append((old, new))
        elif o and n:
            problems.append(f"both {old} and {new} exist: move or merge by hand first")
        else:
            problems.append(f"{old} is missing (and {new} is not there): update MOVES in {SELF}")
    tracked = set(sh(root, "git", "ls-files").split())
    for pattern in MUST_MOVE_GLOBS:
        for p in sorted(root.glob(pattern)):
            rel = p.relative_to(root).as_posix()
            if rel in tracked and not any(rel == o or rel.startswith(o + "/") for o, _ in MOVES):
                problems.append(f"{rel} is not in MOVES but belongs with a moved group: add it")
    if problems:
        sys.exit("layout-move: nothing changed:\n  " + "\n  ".join(problems))
    return plan


def module_map() -> list[tuple[str, str]]:
    """(old dotted, new dotted), longest old first, so a sub-package wins over its parent."""
    pairs = [(dotted(o), dotted(n)) for o, n in MOVES + OPTIONAL_MOVES]
    return sorted(pairs, key=lambda p: -len(p[0]))


def path_map() -> list[tuple[str, str]]:
    pairs = [(o.removesuffix(".py"), n.removesuffix(".py")) for o, n in MOVES + OPTIONAL_MOVES] + list(PATH_GLOBS.items())
    return sorted(pairs, key=lambda p: -len(p[0]))


def resolve(name: str, mods: list[tuple[str, str]]) -> str | None:
    for old, new in mods:
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


FROM_IMPORT = re.compile(
    r"^(?P<ind>[ \t]*)from[ \t]+(?P<pkg>[\w.]+)[ \t]+import[ \t]+"
    r"(?:\((?P<paren>[^)]*)\)|(?P<line>[^\n#]*?))(?P<tail>[ \t]*(?:#[^\n]*)?)$", re.M)


def rewrite_from_imports(text: str, mods: list[tuple[str, str]]) -> str:
    """``from PKG import MOD`` where PKG.MOD moved: MOD imported from its new package."""
    def one(m: re.Match) -> str:
        pkg = m["pkg"]
        body = m["paren"] if m["paren"] is not None else m["line"]
        names = [n.strip() for n in re.sub(r"#[^\n]*", "", body).replace("\\\n", " ").split(",") if n.strip()]
        kept, moved = [], {}
        for item in names:
            parts = item.split()
            name, alias = parts[0], (parts[2] if len(parts) == 3 and parts[1] == "as" else None)
            new = resolve(f"{pkg}.{name}", mods)
            if new is None or new == f"{resolve(pkg, mods) or pkg}.{name}":  # the package's rewrite covers it
                kept.append(item)
                continue
            bound = alias or name
            new_pkg, _, new_name = new.rpartition(".")  # new_pkg "": a top-level package now
            moved.setdefault(new_pkg, []).append(new_name if bound == new_name else f"{new_name} as {bound}")
        if not moved:
            return m[0]
        ind = m["ind"]
        lines = [f"{ind}from {pkg} import {', '.join(kept)}{m['tail']}"] if kept else []
        for p, ns in moved.items():
            lines += [f"{ind}import {n}" for n in ns] if not p else [f"{ind}from {p} import {', '.join(ns)}"]
        if not kept:
            lines[-1] += m["tail"]
        return "\n".join(lines)
    return FROM_IMPORT.sub(one, text)


def name_pattern(olds: list[str], sep: str) -> re.Pattern:
    alts = "|".join(re.escape(o) for o in olds)
    if sep == ".":  # a dotted name: not part of a longer name or attribute chain
        return re.compile(rf"(?<![\w.])(?:{alts})(?![\w])")
    return re.compile(rf"(?<![\w.\-])(?:{alts})(?![\w])")  # a path: may follow a folder (/work/x/...)


def rewrite_text(text: str, mods: list[tuple[str, str]], paths: list[tuple[str, str]]) -> str:
    text = rewrite_from_imports(text, mods)
    dm = dict(mods)
    text = name_pattern([o for o, _ in mods], ".").sub(lambda m: dm[m[0]], text)
    pm = dict(paths)
    return name_pattern([o for o, _ in paths], "/").sub(lambda m: pm[m[0]], text)


def text_files(root: Path) -> list[Path]:
    out = []
    for rel in sh(root, "git", "ls-files").split("\n"):
        if not rel or rel == SELF:
            continue
        p = root / rel
        if p.is_file() and not p.is_symlink():
            try:
                p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            out.append(p)
    return out


def update_pyproject(root: Path) -> bool:
    p = root / "pyproject.toml"
    text = p.read_text(encoding="utf-8")
    m = re.search(r"(include\s*=\s*\[)([^\]]*)(\])", text)
    if not m:
        print("  ! pyproject.toml: no `include = [...]` in [tool.setuptools]: add", NEW_TOP_PACKAGES, "by hand")
        return False
    have = re.findall(r'"([^"]+)"', m[2])
    add = [f"{pkg}*" for pkg in NEW_TOP_PACKAGES if f"{pkg}*" not in have]
    if not add:
        return False
    body = ", ".join(f'"{x}"' for x in have + add)
    p.write_text(text[:m.start(2)] + body + text[m.end(2):], encoding="utf-8")
    return True


ARCH_ROWS = {
    # first cell -> {cell to replace (2 or 3): new text}
    "`packer/`": {3: "pure (tests/unit/test_pure_cores.py)"},
    "`mig/`": {3: "pure (catalogue data read at import; tests/unit/test_pure_cores.py)", 2: "MIG: GPU catalogues (`catalog`, data in `mig/data/`), the partition state machine (`fsm`), "
                  "placement policies (`policies`, `demand`, `planner`), layouts (`layout`, `node_layout`), shares "
                  "per GPU that always fit (`share_ladder`), offline replay and bench (`simulate`, `bench`); the "
                  "backend protocol (`backend`) and its errors (`errors`), `apply` (a layout onto a backend)"},
    "`predictor/`": {3: "pure, except the offline readers `series` and `bench` (CSV files named by the caller)"},
}
ARCH_NEW_ROWS = [  # inserted after the predictor/ row of the first table
    "| `gpus/` | the GPU backends behind `mig.backend.GpuBackend`: `gpus/nvml/` (`backend`, `session`, `catalog`, "
    "`instances`, `counters`: the only pynvml code) and the simulated GPU `gpus/sim/` (`backend`, `store` (its state "
    "file and lock), `memory`, `counters`, and `nvml/`: the simulated GPU's `libnvidia-ml`, docs/nvml.md) | adapters |",
    "| `store/` | the SQLite store (`db`: history, pairs, pair speeds, events, schema migrations; `curves`; `ledger`: "
    "the action ledger) and atomic JSON files (`jsonfile`, used by the helper, the agent and the simulated GPU) "
    "| adapter |",
]
ARCH_DIFFERS = """### What the layout guarantees

`packer/`, `predictor/` and `mig/` (the pure cores) import no `sqlite3`, `subprocess`,
`socket`, `pynvml` or adapter package (`slurm_plugin`, `gpus`, `store`, `simulator`,
`simjobs`), and open no files but the catalogue data read at import and `predictor`'s offline
readers: `tests/unit/test_pure_cores.py` checks it on every module.

"""


# prose the token rewrite leaves stale: (file, old, new); whitespace in `old` matches any run
PROSE = [
    ("docs/real-gpu.md", "`nvml_catalog.py`, `nvml_instances.py` and `nvml_counters.py`",
     "`catalog.py`, `instances.py` and `counters.py`"),
    ("mig/__init__.py", "MIG partition manager: catalogues, the partition state machine, layout policies, backends.",
     "MIG partition manager: catalogues, the partition state machine, layout policies, the backend protocol\n"
     "(the backends themselves are in `gpus/`)."),
    ("mig/__init__.py", "``gpus.sim.store`` / ``sim_memory`` / ``sim_counters``",
     "``gpus.sim.store`` / ``gpus.sim.memory`` / ``gpus.sim.counters``"),
    ("packer/__init__.py", "; `store.Store` is the SQLite store (history, pairs, pair speeds, events, action ledger).",
     ". The SQLite store\n(history, pairs, pair speeds, events, action ledger) is `store.db.Store`, outside this package."),
    ("docs/design-departures.md",
     "- **The store** (SQLite through sqlite-utils and plain `sqlite3`) sits in `packer/`, the simulated GPU is "
     "split between `mig/` and `simjobs/`, and the simulator sits under `slurm_plugin/`: docs/architecture.md "
     "lists these as the layout's open points.",
     "- **The GPU backends** (NVML and the simulated GPU) live in `gpus/`, not in `mig/`: `mig/`\n"
     "  keeps the state machine, catalogues, policies and the backend protocol, and no I/O. The\n"
     "  simulator (`simulator/`) and the simulated jobs (`simjobs/`) have top-level folders of\n"
     "  their own; the store (`store/`) is outside `packer/`, as the card says."),
    ("slurm_plugin/__init__.py", "Also the simulator (`simulator/`), the simulated workload (`simgpu/`), the Prometheus",
     "Also the Prometheus"),
]


def fix_prose(root: Path) -> list[str]:
    notes = []
    for rel, old, new in PROSE:
        p = root / rel
        text = p.read_text(encoding="utf-8") if p.exists() else ""
        pat = re.compile(r"\s+".join(re.escape(w) for w in old.split()))
        if pat.search(text):
            p.write_text(pat.sub(lambda _m: new, text, count=1), encoding="utf-8")
        elif new not in text:
            notes.append(f"{rel}: prose not found, check by hand: {old!r}")
    return notes


def split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def update_architecture(root: Path) -> list[str]:
    p = root / "docs/architecture.md"
    if not p.exists():
        return ["docs/architecture.md is missing"]
    lines = p.read_text(encoding="utf-8").split("\n")
    notes, seen, out = [], set(), []
    sim_row = None
    for line in lines:
        cells = split_row(line) if line.startswith("| `") else []
        key = cells[0] if cells else None
        if key in ARCH_ROWS and len(cells) == 3 and key not in seen:
            for i, new in ARCH_ROWS[key].items():
                cells[i - 1] = new
            if key == "`predictor/`":
                cells[1] = cells[1].replace("`sources`, ", "")
            line = "| " + " | ".join(cells) + " |"
            seen.add(key)
        if key == "`simulator/`" and len(cells) == 2:  # the slurm_plugin table's row: to the top table
            sim_row = f"| `simulator/` | {cells[1]} | adapter (drives the pure cores on a simulated cluster) |"
            seen.add(key)
            continue
        if key == "`simgpu/`" and len(cells) == 2:
            seen.add(key)
            continue
        if key == "`agent/`" and len(cells) == 2 and "memory_sources" not in line:
            line = line.rstrip().removesuffix("|").rstrip() + (", `memory_sources` (memory series from NVML, "
                                                               "cgroups, procfs, a PyTorch probe) |")
            seen.add(key)
        out.append(line)
    # new rows after the predictor/ row
    for i, line in enumerate(out):
        if line.startswith("| `predictor/` |"):
            rows = [r for r in ARCH_NEW_ROWS if r not in out]
            if sim_row and sim_row not in out:
                rows.insert(0, sim_row)
            rows.append("| `simjobs/` | the simulated jobs: the workload a test or demo job runs (`workload`: "
                        "`gpupack simgpu run`), the measured pair speeds it slows by (`pairs`, `pair_speeds.json`), "
                        "the counters bench (`counter_bench`) | adapter |")
            rows = [r for r in rows if r not in out]
            out[i + 1:i + 1] = rows
            break
    text = "\n".join(out)
    m = re.search(r"### Where the code still differs from the intended layout\n.*?(?=\n## )", text, re.S)
    if m:
        text = text[:m.start()] + ARCH_DIFFERS.rstrip("\n") + "\n" + text[m.end():]
        seen.add("differs")
    already = {"`agent/`": "memory_sources" in text, "`simgpu/`": "| `simgpu/` |" not in text,
               "`simulator/`": any(r.startswith("| `simulator/` |") and len(split_row(r)) == 3 for r in out),
               "differs": "### What the layout guarantees" in text}
    for want in list(ARCH_ROWS) + list(already):
        if want not in seen and not already.get(want):
            notes.append(f"docs/architecture.md: row or section {want} not found; update it by hand")
    p.write_text(text, encoding="utf-8")
    return notes


IMPURE = {"sqlite3", "sqlite_utils", "subprocess", "socket", "pynvml", "fcntl", "ctypes", "tempfile", "shutil",
          "os", "slurm_plugin", "gpus", "store", "simulator", "simjobs"}


def impure_left(root: Path) -> list[str]:
    """Modules of the pure cores that still import I/O or an adapter (tests/unit/test_pure_cores.py fails)."""
    import ast  # noqa: PLC0415 - only this check parses
    out = []
    for p in sorted(q for pkg in ("packer", "predictor", "mig") for q in (root / pkg).glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        if names & IMPURE:
            out.append(f"{p.relative_to(root)} imports {sorted(names & IMPURE)}: add it to MOVES, or split it by hand")
    return out


FILE_PARENTS = re.compile(r"parents\[(\d+)\]")


def fix_file_parents(root: Path, old: str, new: str) -> list[str]:
    """``Path(__file__)...parents[K]`` in a moved module: K follows the move's change of depth when
    it points at or above the moved folder (the checkout, say); a ``.parent.parent`` chain or
    ``dirname(dirname(__file__))`` is only reported."""
    notes = []
    delta = len(Path(old).parts) - len(Path(new).parts)
    target = root / new
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    for f in files:
        inside = len(f.relative_to(target).parts) - 1 if target.is_dir() else -1  # parents[K<=inside]: moved along
        lines = f.read_text(encoding="utf-8").split("\n")
        changed = False
        for i, line in enumerate(lines):
            if "__file__" not in line:
                continue
            def shift(m: re.Match) -> str:
                k = int(m[1])
                return m[0] if k <= inside or delta == 0 else f"parents[{k - delta}]"
            fixed = FILE_PARENTS.sub(shift, line)
            if fixed != line:
                if re.search(r"parents\[-", fixed):
                    notes.append(f"{f.relative_to(root)}:{i + 1}: parents[] above the root after the move: fix by hand")
                    continue
                lines[i], changed = fixed, True
                notes.append(f"{f.relative_to(root)}:{i + 1}: depth changed by {-delta}: now `{fixed.strip()}` (check)")
            elif re.search(r"\.parent\.parent|dirname\(\s*os\.path\.dirname", line) and delta:
                notes.append(f"{f.relative_to(root)}:{i + 1}: relative to __file__, depth changed by {-delta}: fix by hand")
        if changed:
            f.write_text("\n".join(lines), encoding="utf-8")
    return notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    ap.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    args = ap.parse_args()
    root = Path(sh(Path.cwd(), "git", "rev-parse", "--show-toplevel").strip())
    if not args.allow_dirty and not args.dry_run and sh(root, "git", "status", "--porcelain", "--untracked-files=no").strip():
        sys.exit("layout-move: the tree has uncommitted changes; commit them first (or --allow-dirty)")
    plan = check(root)
    for old, new in plan.done:
        print(f"  already moved: {old} -> {new}")
    for old, new in plan.todo:
        print(f"  {'would move' if args.dry_run else 'move'}: {old} -> {new}")
    mods, paths = module_map(), path_map()
    if not args.dry_run:
        depth_notes = []
        for old, new in plan.todo:
            (root / new).parent.mkdir(parents=True, exist_ok=True)
            sh(root, "git", "mv", old, new)
            depth_notes += fix_file_parents(root, old, new)
        for note in depth_notes:
            print("  !", note)
        for pkg, doc in NEW_PACKAGES.items():
            init = root / pkg / "__init__.py"
            if not init.exists():
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(doc, encoding="utf-8")
                sh(root, "git", "add", init.relative_to(root).as_posix())
    changed = []
    for p in text_files(root):
        text = p.read_text(encoding="utf-8")
        new = rewrite_text(text, mods, paths)
        if new != text:
            changed.append(p.relative_to(root).as_posix())
            if not args.dry_run:
                p.write_text(new, encoding="utf-8")
    print(f"  {'would rewrite' if args.dry_run else 'rewrote'} {len(changed)} files:")
    for rel in changed:
        print(f"    {rel}")
    if args.dry_run:
        return
    if update_pyproject(root):
        print("  pyproject.toml: added", ", ".join(f"{x}*" for x in NEW_TOP_PACKAGES), "to package discovery")
    for note in update_architecture(root) + fix_prose(root) + impure_left(root):
        print("  !", note)
    sh(root, "git", "add", "-u")
    sh(root, "git", "add", "--", *NEW_TOP_PACKAGES)
    # what still names an old module or path (prose such as "sim_store" alone is not searched)
    olds = [re.escape(o) for o, _ in mods] + [re.escape(o) for o, _ in paths]
    left = name_pattern(olds, ".")
    residue = [f"{p.relative_to(root)}:{i}: {line.strip()}" for p in text_files(root)
               for i, line in enumerate(p.read_text(encoding="utf-8").split("\n"), 1) if left.search(line)]
    if residue:
        print("  ! still naming an old module or path (fix by hand):")
        for r in residue:
            print("    " + r)
    print("layout-move: done; review `git status` and `git diff --cached --stat`, run the tests, commit.")


if __name__ == "__main__":
    main()
