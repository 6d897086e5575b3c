"""A job's fingerprint: who runs it, what it is called, and what its batch script does.

Two submissions with the same fingerprint are taken to be runs of the same workload, so
the history of one estimates the other. Pure and deterministic; bytes in, hex out.

**Edits that do not change the workload** (:func:`workload_text`). A shell batch script
(no ``#!`` line, or one naming sh, bash, dash, ksh or zsh) is read as the shell reads it,
and these edits leave its fingerprint as it was:

- full-line comments: a line whose first non-blank characters are ``#`` followed by a
  space, a tab, another ``#`` or the end of the line (``# note``, ``## ---``, ``#``);
- blank lines, and spaces or tabs at the start or end of a line.

Everything else counts, however small: ``#SBATCH`` and other directive lines (``#PBS``,
``#DW``, any ``#`` followed by a letter), the ``#!`` line, a comment after a command on the
same line, whitespace inside a line, line endings (``\\r\\n``), any line ending in a
backslash (a comment too), and every line the shell does not read as a new command: inside
quotes that span lines, inside a here-document, and after a line ending in a backslash (the
two lines are one command). A script whose quoting the reader cannot follow to its end,
one over 64 KiB (``MAX_READ_BYTES``: the submit path decides in milliseconds), or one that
another interpreter runs (``#!/usr/bin/env python3``: indentation is meaning there), is
taken byte for byte.

Fingerprints of scripts with comments or blank lines differ from those of releases that
hashed the exact bytes: their earlier history is found again after their next measured run.
"""
from __future__ import annotations

import hashlib
import re

FINGERPRINT_HEX_CHARS = 16
SHELLS = frozenset({"sh", "bash", "dash", "ksh", "zsh"})
#: a larger script is taken byte for byte: the submit path decides within the shim's ~50 ms
MAX_READ_BYTES = 64 * 1024

_COMMENT_LINE = re.compile(rb"^#([ \t#]|$)")
_HEREDOC = re.compile(rb"<<(-?)[ \t]*(['\"]?)([A-Za-z0-9_.\-]+)\2")
_BLANK = b" \t"


def fingerprint(user: str, name: str, script: bytes | str) -> str:
    """Hash of user, job name and the batch script as its workload (:func:`workload_text`)."""
    if isinstance(script, str):
        script = script.encode("utf-8", "surrogateescape")
    digest = hashlib.sha256()
    for part in (user.encode("utf-8", "surrogateescape"), name.encode("utf-8", "surrogateescape")):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    digest.update(workload_text(script))
    return digest.hexdigest()[:FINGERPRINT_HEX_CHARS]


def _is_shell(script: bytes) -> bool:
    if not script.startswith(b"#!"):
        return True
    words = script[2:].split(b"\n", 1)[0].split()
    if words and words[0].endswith(b"/env"):
        words = [w for w in words[1:] if not w.startswith(b"-")]
    return bool(words) and words[0].rsplit(b"/", 1)[-1].decode("latin-1") in SHELLS


def workload_text(script: bytes) -> bytes:
    """The script without the edits that do not change what it runs (module docstring);
    the exact bytes where it cannot tell."""
    if len(script) > MAX_READ_BYTES or not _is_shell(script):
        return script
    kept: list[bytes] = []
    quote: bytes | None = None  # the quote a line ended inside of
    heredocs: list[tuple[bytes, bool]] = []  # delimiters still to come, (word, tabs stripped)
    joined = False  # the line before ended in a backslash: this line continues it
    for number, line in enumerate(script.split(b"\n")):
        if heredocs:  # a here-document's body is data, kept as it is
            word, tabs = heredocs[0]
            if (line.lstrip(b"\t") if tabs else line) == word:
                heredocs.pop(0)
            kept.append(line)
            continue
        verbatim = quote is not None or joined or (number == 0 and line.startswith(b"#!"))
        stripped = line.strip(_BLANK)
        if stripped.endswith(b"\\"):  # `a \ ` (an escaped blank) is not `a \` (a continued line)
            stripped = line.lstrip(_BLANK)
        elif not verbatim and (not stripped or _COMMENT_LINE.match(stripped)):
            continue
        quote, joined, opened = _scan(line, quote)
        if opened is None:
            return script  # quoting it cannot follow: byte for byte
        heredocs.extend(opened)
        kept.append(line if verbatim else stripped)
    if quote is not None or heredocs:
        return script
    return b"\n".join(kept)


_SPECIAL = re.compile(rb"[\\'\"`#<]")
_IN_DOUBLE = re.compile(rb'[\\"]')


def _scan(line: bytes, quote: bytes | None) -> tuple[bytes | None, bool, list[tuple[bytes, bool]] | None]:
    """(the quote the line ends inside of, whether it ends in a continuing backslash, the
    here-documents it opens); opened None where the reader gives up (``$'...'``, backquotes
    across lines). Jumps from one character that matters to the next."""
    opened: list[tuple[bytes, bool]] = []
    i, n = 0, len(line)
    while i < n:
        if quote == b"'":
            end = line.find(b"'", i)
            if end < 0:
                return quote, False, opened
            quote, i = None, end + 1
            continue
        if quote == b'"':
            m = _IN_DOUBLE.search(line, i)
            if m is None:
                return quote, False, opened
            i = m.end() + (m.group() == b"\\")  # an escaped character is skipped
            quote = quote if m.group() == b"\\" else None
            continue
        m = _SPECIAL.search(line, i)
        if m is None:
            break
        i, c = m.start(), m.group()
        if c == b"\\":
            if i == n - 1:
                return None, True, opened
            i += 2
            continue
        if c == b"'" and line[i - 1:i] == b"$":
            return None, False, None  # ANSI-C quoting: escapes inside single quotes
        if c in (b"'", b'"'):
            quote = c
        elif c == b"`":
            if b"`" not in line[i + 1:]:
                return None, False, None
        elif c == b"#":
            if i == 0 or line[i - 1:i] in b" \t;&|()":
                break  # a comment: the rest of the line is not read for quotes
        elif line[i:i + 2] == b"<<" and line[i + 2:i + 3] != b"<":
            m = _HEREDOC.match(line, i)
            if m is None:
                return None, False, None
            opened.append((m.group(3), m.group(1) == b"-"))
            i = m.end()
            continue
        elif line[i:i + 3] == b"<<<":
            i += 3
            continue
        i += 1
    return quote, False, opened
