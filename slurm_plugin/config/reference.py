"""docs/config.md, generated from the schema (`whole.SECTIONS`): every table and key with its
type, range or choices and default, and the description etc/gpupack.toml gives it (the
commented example file, itself checked against the loaders). `gpupack config reference`
prints it; a test checks that the page in docs/ is this text."""
from __future__ import annotations

import re
from pathlib import Path

from packer.action_modes import ACTION_KINDS
from packer.settings_schema import describe
from slurm_plugin.config.whole import MAPS, SECTIONS

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "gpupack.toml"

HEADER = """# gpupack.toml reference

Generated from the settings schema by `gpupack config reference > docs/config.md`; do not edit
by hand (a test checks that this page is up to date). Every key is optional. `gpupack config
check FILE` checks a file offline: unknown tables and keys, types and ranges, each problem
naming the key, the value and what is allowed. A running helper re-reads the file when it
changes; an edit that does not pass keeps every setting in force, is logged, written to the
event log (`config-refused`) and shown by `gpupack_config_refused`. `[packer]` and
`[monitor.actions]` take effect at once, the other tables when the daemon restarts.
The commented example with the defaults is etc/gpupack.toml.
"""


def _descriptions(text: str) -> dict[tuple[str, str], str]:
    """(table, key) -> the comment etc/gpupack.toml gives the key: on its line (else the
    comment lines just above it) and the continuation lines under it."""
    out: dict[tuple[str, str], str] = {}
    section = ""
    above: list[str] = []
    last: tuple[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        header = re.match(r"^\[([a-z.]+)\]$", line)
        key = re.match(r"^#?\s*([a-z][a-z0-9_-]*)\s*=\s*[^#]*?(?:#\s*(.*))?$", line)
        if header:
            section, above, last = header.group(1), [], None
        elif key and not (line.startswith("#") and " = " not in line):
            name, comment = key.group(1), (key.group(2) or "").strip()
            out[(section, name)] = comment or " ".join(above)  # its own comment, else the block above it
            above, last = [], (section, name)
        elif line.startswith("#") and raw.startswith(" ") and last is not None:  # continues the key's comment
            out[last] = f"{out[last]} {line.lstrip('# ').strip()}".strip()
        elif line.startswith("#"):
            above.append(line.lstrip("# ").strip())
            last = None
        else:
            above, last = [], None
    return out


def render(example: Path = EXAMPLE) -> str:
    notes = _descriptions(example.read_text())
    parts = [HEADER]
    for section, cls in SECTIONS.items():
        parts.append(f"\n## [{section}]\n\n| key | default | allowed | what it does |\n|---|---|---|---|")
        for key, default, allowed in describe(cls):
            if section == "monitor" and key == "actions":
                parts.append("| `[monitor.actions]` | `{}` | a table: action = \"off\", \"shadow\" or \"enforce\" | "
                             "each run-time action's mode; one not named follows `mode` (enforce in enforce mode, "
                             "else shadow) |")
                for action in ACTION_KINDS:
                    parts.append(f"| `{action}` | follows `mode` | \"off\", \"shadow\" or \"enforce\" | "
                                 f"{_cell(notes.get(('monitor.actions', action), ''))} |")
                continue
            parts.append(f"| `{key}` | `{default}` | {allowed} | {_cell(notes.get((section, key), ''))} |")
    for section, what in MAPS.items():
        parts.append(f"\n## [{section}]\n\nA map, empty by default: {_cell(what)}.")
    return "\n".join(parts) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
