"""The README's promises: every command it shows exists as shown, every page it links exists.

A command line is any code span or code-block line that starts `gpupack ...` or
`python3 -m slurm_plugin ...` (also as a venv's `/opt/gpupack/venv/bin/gpupack ...`): its words must walk the click tree to a real command, each
option it names must be one that command (or a group above it) takes, and that command's
`--help` must answer. Links: every relative Markdown link in README.md and docs/*.md, and
every `docs/NAME.md` the README, docs/ and etc/ name (systemd `Documentation=` too), is a
file of the checkout.
"""
from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurm_plugin.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 300

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"`([^`\n]+)`")
# where a command starts inside a code text: not part of a longer word or path
_VENV_BIN = r"(?:/[\w./-]*/bin/)?"  # the installed suite's interpreter and commands: a venv's bin/
_START = re.compile(rf"(?<![\w/.-]){_VENV_BIN}(gpupack|python3 -m slurm_plugin)(?=[ \n]|$)")
_MODULE = re.compile(rf"(?<![\w/.-]){_VENV_BIN}python3 -m (slurm_plugin\.[\w.]+)")
_SHELL_END = re.compile(r"\s(?:#|\||;|&&|\|\|)|[)\"]")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_DOCS_NAME = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md)")


def code_texts(markdown: str) -> list[str]:
    """Each code-block line and each inline code span, as written."""
    texts = []
    for block in _FENCE.findall(markdown):
        block = block.replace("\\\n", " ")  # shell line continuations
        texts.extend(line for line in block.splitlines() if line.strip())
    outside = _FENCE.sub("", markdown)
    texts.extend(_SPAN.findall(outside))
    return texts


def command_lines(markdown: str) -> list[list[str]]:
    """The words of every `gpupack ...` / `python3 -m slurm_plugin ...` command shown."""
    commands = []
    for text in code_texts(markdown):
        for start in _START.finditer(text):
            rest = text[start.end():]
            end = _SHELL_END.search(rest)
            shown = rest[: end.start()] if end else rest
            try:
                words = shlex.split(shown)
            except ValueError:  # unbalanced quotes in prose: plain words
                words = shown.split()
            commands.append(words)
    return commands


def _option(command: click.Command, word: str) -> click.Option | None:
    name = word.split("=", 1)[0]
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    if re.fullmatch(r"-([a-zA-Z])\1+", name):  # -vv: a count option repeated
        option = _option(command, name[:2])
        return option if option is not None and option.count else None
    return None


def resolve(words: list[str]) -> tuple[list[str], list[str]]:
    """The command path the words name, and what is wrong with them (empty: nothing)."""
    command: click.Command = main
    path: list[str] = []
    chain = [main]
    problems = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            break
        if word.startswith("-"):
            if word in ("-h", "--help"):
                continue
            option = next((o for o in (_option(c, word) for c in reversed(chain)) if o), None)
            if option is None:
                problems.append(f"{word} is no option of gpupack {' '.join(path)}")
            elif not (option.is_flag or option.count) and "=" not in word:
                i += 1  # its value
            continue
        if isinstance(command, click.Group):
            sub = command.get_command(click.Context(command), word)
            if sub is None:
                problems.append(f"{word!r} is no sub-command of gpupack {' '.join(path)}")
                break
            command = sub
            path.append(word)
            chain.append(sub)
        # else: an argument of a leaf command
    return path, problems


def test_every_readme_command_parses_and_has_help():
    commands = command_lines(README.read_text())
    assert len(commands) >= 25, commands  # the extractor found the commands table
    runner = CliRunner()
    checked = set()
    for words in commands:
        path, problems = resolve(words)
        assert not problems, (words, problems)
        if tuple(path) in checked:
            continue
        checked.add(tuple(path))
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output
    assert len(checked) >= 20


def test_every_python_module_the_readme_runs_exists():
    modules = _MODULE.findall(README.read_text())
    assert modules, "the README shows the controller epilog's python3 -m line"
    for module in modules:
        assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize("page", [README, *sorted((ROOT / "docs").glob("*.md"))],
                         ids=lambda p: p.name)
def test_relative_links_resolve(page: Path):
    text = page.read_text()
    targets = [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]
    for target in targets:
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page.name} links {target}, which does not exist"


def test_every_docs_page_the_readme_names_exists():
    names = set(_DOCS_NAME.findall(README.read_text()))
    assert "docs/architecture.md" in names and "docs/design-departures.md" in names
    for name in names:
        assert (ROOT / name).is_file(), name


def test_every_docs_page_the_docs_and_etc_name_exists():
    """docs/ pages and etc/ files (comments, systemd Documentation=) name only pages that exist."""
    files = sorted((ROOT / "docs").glob("*.md")) + sorted(p for p in (ROOT / "etc").rglob("*") if p.is_file())
    named = 0
    for path in files:
        for name in _DOCS_NAME.findall(path.read_text(errors="replace")):
            named += 1
            assert (ROOT / name).is_file(), f"{path.relative_to(ROOT)} names {name}, which does not exist"
    assert named > 10
    units = (ROOT / "etc" / "systemd").glob("*.service")
    for unit in units:
        for line in unit.read_text().splitlines():
            if line.startswith("Documentation="):
                for uri in line.split("=", 1)[1].split():
                    doc = uri.split("/usr/share/doc/slurm-gpu-packer/", 1)
                    assert len(doc) == 2 and (ROOT / doc[1]).is_file(), f"{unit.name}: {uri}"


def test_readme_stays_a_front_door():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move details to docs/"


def _install_steps() -> str:
    text = README.read_text()
    start = text.index("## Install on a real cluster")
    return text[start:text.index("\n## ", start + 1)]


def test_readme_installs_into_a_venv_never_the_system_python():
    """The install steps make a venv with `python3 -m venv` and pip-install into it; the suite's
    commands there (epilogs, the PAM line) run that venv's interpreter, never a bare python3/pip."""
    steps = _install_steps()
    assert "`python3 -m venv /opt/gpupack/venv && /opt/gpupack/venv/bin/pip install .`" in steps
    runs = [text for text in code_texts(steps) if _START.search(text) or "pip install" in text]
    assert len(runs) >= 4, runs  # pip, two epilogs, the PAM line, config check
    for text in runs:
        for found in re.finditer(r"(?<![\w/.-])(python3 -m slurm_plugin|pip install)", text):
            assert False, f"{text!r} runs the system's {found.group(1).split()[0]}, not /opt/gpupack/venv/bin/"
    for name in ("gpupack agent adopt-check", "python3 -m slurm_plugin.ctld_epilog", "python3 -m slurm_plugin epilog"):
        assert f"/opt/gpupack/venv/bin/{name}" in steps, name


def test_the_venv_commands_are_checked_as_commands():
    """A command behind a venv's bin/ is still a command the checks above walk."""
    assert command_lines("`/opt/gpupack/venv/bin/gpupack agent adopt-check`") == [["agent", "adopt-check"]]
    assert _MODULE.findall("`/opt/gpupack/venv/bin/python3 -m slurm_plugin.ctld_epilog`") == ["slurm_plugin.ctld_epilog"]
    assert command_lines("`python3 -m venv /opt/gpupack/venv`") == []


def test_resolve_catches_a_wrong_command_and_option():
    """The checker itself can fail: a made-up sub-command or option is reported."""
    assert resolve(["devcluster", "upp"])[1]
    assert resolve(["jobs", "--jsonn"])[1]
    assert resolve(["-vv", "helper"]) == (["helper"], [])
    assert resolve(["jobs", "-jj"])[1]
    assert resolve(["--slurm", "24.11", "jobs", "--json"]) == (["jobs"], [])
    assert command_lines('run `eval "$(gpupack devcluster env --slurm 24.11)"` first') == [
        ["devcluster", "env", "--slurm", "24.11"]]
