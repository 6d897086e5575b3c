"""A workload's identity at three levels, from the tightest match to the loosest. Pure.

History is looked up by the nearest level that has it (``packer.history_levels``), with more
headroom the looser the match. Every level's key holds the user: history never crosses users.

- ``exact``: the user, the job name and the batch script as its workload
  (``packer.fingerprint``: today's fingerprint, the ``fp=`` of the AdminComment);
- ``variant``: the same script with its *values* abstracted (:func:`variant_text`): numbers
  (``--lr 0.01`` and ``--lr 0.02``, ``SEED=1``, ``10:00:00``), paths (``/scratch/run1/out.log``
  and ``/scratch/run2/out.log``: the folder is dropped, the digits of the file name abstracted),
  quoting and blanks inside a line; ``#SBATCH`` lines that only schedule the job
  (``SCHEDULING_OPTIONS``: ``--time``, ``--output``, ``--mail-user``, ...) are left out; the
  job name's digits are abstracted (``exp-lr0.01`` and ``exp-lr0.02``). What stays: every
  program, option name and word value (``--model vit`` is not ``--model resnet``), every
  line of work and every directive that shapes the job;
- ``command``: the user, the job name (digits abstracted) and the commands the script runs
  (:func:`command_text`: each line's program and the script or module it runs, e.g.
  ``python train.py``, ``srun python -m pkg.train``), its options and setup lines (``cd``,
  ``export``, ``module load``, ``echo``, ...) aside; only for shell scripts that run at least
  one command.

The levels nest: scripts equal at one level are equal at every looser one. A script the
fingerprint takes byte for byte because it is too large (``MAX_READ_BYTES``) has only its
exact level; one another interpreter runs (``#!/usr/bin/env python3``) has no command level.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from packer.fingerprint import FINGERPRINT_HEX_CHARS, MAX_READ_BYTES, _is_shell, fingerprint, workload_text

EXACT, VARIANT, COMMAND = "exact", "variant", "command"
LEVELS = (EXACT, VARIANT, COMMAND)  # nearest first

#: #SBATCH options that say when, where and with what bookkeeping a job runs, not what it runs
SCHEDULING_OPTIONS = frozenset({
    "time", "t", "time-min", "output", "o", "error", "e", "input", "i", "job-name", "J", "mail-user",
    "mail-type", "partition", "p", "account", "A", "qos", "q", "comment", "begin", "b", "dependency", "d",
    "requeue", "no-requeue", "open-mode", "signal", "nice", "priority", "deadline", "reservation",
    "exclude", "x", "nodelist", "w", "wckey", "chdir", "D", "hold", "H", "parsable", "kill-on-invalid-dep",
    "array", "a", "license", "L", "clusters", "M", "uid", "gid", "export-file", "propagate",
})
#: lines whose program only sets the stage or reports (left out of the command level)
SETUP_PROGRAMS = frozenset({
    "cd", "pushd", "popd", "export", "unset", "set", "shopt", "declare", "local", "readonly", "module", "ml",
    "source", ".", "conda", "mamba", "echo", "printf", "mkdir", "rm", "cp", "mv", "ln", "touch", "ulimit",
    "umask", "trap", "sleep", "date", "hostname", "nvidia-smi", "wait", "exit", "true", "false", "cat",
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in",
    "{", "}", "(", ")", "[", "[[", "test", "return", "break", "continue", "shift", "env", "printenv", "which",
})
SCRIPT_SUFFIXES = (".py", ".sh", ".jl", ".R", ".r", ".lua", ".pl", ".rb", ".js", ".ipynb", ".m")
NUMBER = "<n>"
FOLDER = "<path>/"

_SCI = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_DIGITS = re.compile(r"\d+(?:\.\d+)*|\.\d+")
_LETTER = re.compile(r"[A-Za-z]")
_KEY = re.compile(r"-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*")
_DIRECTIVE = re.compile(r"#SBATCH\s+(-{1,2})([A-Za-z][A-Za-z\-]*)")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class WorkloadKeys:
    """The key of each level (None: the script has no such level)."""

    exact: str
    variant: str | None
    command: str | None

    def key(self, level: str) -> str | None:
        if level not in LEVELS:
            raise ValueError(f"unknown history level {level!r}; one of {', '.join(LEVELS)}")
        return getattr(self, level)

    def known(self) -> tuple[tuple[str, str], ...]:
        """(level, key) of each level the script has, nearest first."""
        return tuple((lv, k) for lv in LEVELS if (k := getattr(self, lv)) is not None)


def _hash(level: str, user: str, name: str, text: bytes) -> str:
    digest = hashlib.sha256(level.encode() + b"\0")
    for part in (user.encode("utf-8", "surrogateescape"), name.encode("utf-8", "surrogateescape")):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    digest.update(text)
    return digest.hexdigest()[:FINGERPRINT_HEX_CHARS]


def abstract_value(word: str) -> str:
    """A word with its values abstracted: a path keeps only its file name, digits abstracted;
    a word without letters (a number, a time, a date) has its digit runs abstracted; other
    words stay as they are."""
    if "/" in word:
        base = word.rsplit("/", 1)[1]
        return FOLDER + _DIGITS.sub(NUMBER, base)
    if _SCI.fullmatch(word):
        return NUMBER
    if not _LETTER.search(word):
        return _DIGITS.sub(NUMBER, word)
    return word


def abstract_word(word: str) -> str:
    """One blank-separated word of a line, quotes dropped; ``key=value`` keeps its key."""
    word = word.replace('"', "").replace("'", "")
    key, eq, value = word.partition("=")
    if eq and _KEY.fullmatch(key):
        return f"{key}={abstract_value(value)}"
    return abstract_value(word)


def abstract_name(name: str) -> str:
    """A job name with its digit runs abstracted (``exp-lr0.01`` -> ``exp-lr<n>``)."""
    return _DIGITS.sub(NUMBER, name)


def _scheduling_directive(line: str) -> bool:
    m = _DIRECTIVE.match(line)
    return m is not None and m.group(2) in SCHEDULING_OPTIONS and (m.group(1) == "--") == (len(m.group(2)) > 1)


def _readable(script: bytes) -> str | None:
    if len(script) > MAX_READ_BYTES:
        return None
    return workload_text(script).decode("utf-8", "surrogateescape")


def variant_lines(script: bytes) -> list[str] | None:
    """The script's lines at the variant level (None: the script has no variant level)."""
    text = _readable(script)
    if text is None:
        return None
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if not line or _scheduling_directive(line):
            continue
        shebang = line.startswith("#!")  # the interpreter's folder aside, kept as a directive
        words = " ".join(abstract_word(w) for w in (line[2:] if shebang else line).split())
        out.append("#!" + words if shebang else words)
    return out


def variant_text(script: bytes) -> bytes | None:
    lines = variant_lines(script)
    return None if lines is None else "\n".join(lines).encode("utf-8", "surrogateescape")


def _base(word: str) -> str:
    return word[len(FOLDER):] if word.startswith(FOLDER) else word


def command_of(words: list[str]) -> str | None:
    """The program of one abstracted line and what it runs: the words up to the script or
    module it runs (``srun python3 train.py``, ``python3 -m pkg.train``) without options and
    values; with no script or module, the words before the first option. None for a setup
    line, a comment or directive, or a line with nothing to run."""
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i]):
        i += 1
    if i >= len(words) or words[i].startswith("#"):
        return None
    program = _base(words[i])
    if program in SETUP_PROGRAMS or not _LETTER.search(program):
        return None
    rest = words[i + 1:]
    entry = next((j for j, w in enumerate(rest) if (w == "-m" and j + 1 < len(rest))
                  or (not w.startswith("-") and _base(w).endswith(SCRIPT_SUFFIXES))), None)
    if entry is None:
        rest = rest[:next((j for j, w in enumerate(rest) if w.startswith("-")), len(rest))]
    elif rest[entry] == "-m":
        rest = rest[:entry] + ["-m", rest[entry + 1]]
    else:
        rest = rest[:entry + 1]
    kept = [_base(w) for w in rest if w == "-m" or (not w.startswith("-") and _LETTER.search(w) and NUMBER not in w)]
    return " ".join([program, *kept])


def command_text(script: bytes) -> bytes | None:
    """The commands a shell script runs, one a line (None: not a shell script, or none)."""
    if not _is_shell(script):
        return None
    lines = variant_lines(script)
    if lines is None:
        return None
    commands = [c for line in lines if (c := command_of(line.split())) is not None]
    return "\n".join(commands).encode("utf-8", "surrogateescape") if commands else None


def workload_keys(user: str, name: str, script: bytes | str) -> WorkloadKeys:
    """The key of each level of one submission (the exact one is ``packer.fingerprint``'s)."""
    if isinstance(script, str):
        script = script.encode("utf-8", "surrogateescape")
    exact = fingerprint(user, name, script)
    variant = variant_text(script)
    command = command_text(script) if variant is not None else None
    short = abstract_name(name)
    return WorkloadKeys(
        exact,
        None if variant is None else _hash(VARIANT, user, short, variant),
        None if command is None else _hash(COMMAND, user, short, command),
    )
