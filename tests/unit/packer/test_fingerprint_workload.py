"""A workload is recognised across edits that do not change it, and only those
(packer.fingerprint's docstring lists both)."""
import pytest

from packer.fingerprint import fingerprint, workload_text

BASE = b"""#!/bin/bash
#SBATCH --gres=gpu:1
#SBATCH -t 10
# train the model
module load cuda
python train.py --epochs 3 \\
    --lr 0.1
"""

SAME = [
    # comments added, changed, removed; blank lines; indentation; trailing blanks; final newline
    BASE.replace(b"# train the model\n", b""),
    BASE.replace(b"# train the model", b"# train the model (v2, faster)\n\n## -----\n#"),
    BASE.replace(b"module load cuda", b"   module load cuda   \t"),
    BASE + b"\n\n# the end\n",
    BASE.rstrip(b"\n"),
    BASE.replace(b"\npython", b"\n\n\t# about to run\npython"),
]

DIFFERENT = [
    BASE.replace(b"#SBATCH -t 10", b"#SBATCH -t 20"),  # a directive
    BASE.replace(b"#SBATCH -t 10\n", b""),
    BASE.replace(b"#!/bin/bash", b"#!/bin/sh"),  # the interpreter
    BASE.replace(b"--epochs 3", b"--epochs  3"),  # whitespace inside a line
    BASE.replace(b"module load cuda", b"module load cuda  # 12.4"),  # an inline comment
    BASE.replace(b"    --lr 0.1", b"  --lr 0.1"),  # the continued line is one command with the one before
    BASE.replace(b"\n", b"\r\n"),  # line endings
    BASE.replace(b"# train the model", b"#train the model"),  # '#' then a letter: read as a directive
    BASE.replace(b"module load cuda", b"# note \\\nmodule load cuda"),  # a comment ending in a backslash
]


def fp(script: bytes) -> str:
    return fingerprint("alice", "train", script)


@pytest.mark.parametrize("edited", SAME)
def test_edits_that_do_not_change_the_workload_keep_its_fingerprint(edited):
    assert edited != BASE and fp(edited) == fp(BASE)


@pytest.mark.parametrize("edited", DIFFERENT)
def test_edits_that_may_change_what_runs_change_it(edited):
    assert fp(edited) != fp(BASE)


def test_lines_inside_quotes_and_here_documents_are_data():
    heredoc = b"#!/bin/bash\ncat > cfg <<EOF\n# kept\n\n  x  \nEOF\n# dropped\nrun cfg\n"
    assert fp(heredoc) != fp(heredoc.replace(b"# kept\n", b""))
    assert fp(heredoc) != fp(heredoc.replace(b"\n\n  x", b"\n  x"))
    assert fp(heredoc) == fp(heredoc.replace(b"# dropped\n", b""))
    quoted = b"#!/bin/bash\npython -c '\nimport x\n# inside the quote\n'\n"
    assert fp(quoted) != fp(quoted.replace(b"# inside the quote\n", b""))
    dquoted = b"#!/bin/bash\necho \"a\n# in\" # it's a comment, its quote does not open\n# out\n"
    assert fp(dquoted) != fp(dquoted.replace(b"# in", b""))
    assert fp(dquoted) == fp(dquoted.replace(b"# out\n", b""))


def test_an_escaped_trailing_blank_is_not_a_continued_line():
    escaped, continued = b"#!/bin/sh\necho a\\ \nb\n", b"#!/bin/sh\necho a\\\nb\n"
    assert fp(escaped) != fp(continued)


@pytest.mark.parametrize("script", [
    b"#!/usr/bin/env python3\n# comment\nif x:\n    a\n",  # another interpreter: indentation is meaning
    b"#!/bin/bash\necho 'unclosed\n# c\n",  # quoting it cannot follow to its end
    b"#!/bin/bash\necho $'it\\'s'\n# c\n",  # ANSI-C quoting
    b"#!/bin/bash\ncat <<EOF\n# c\n",  # a here-document never closed
])
def test_scripts_it_cannot_read_are_taken_byte_for_byte(script):
    assert workload_text(script) == script


def test_env_shebang_naming_a_shell_is_a_shell():
    script = b"#!/usr/bin/env -S bash\n# c\necho hi\n"
    assert workload_text(script) == b"#!/usr/bin/env -S bash\necho hi"


def test_a_script_over_the_reading_limit_is_taken_byte_for_byte():
    from packer.fingerprint import MAX_READ_BYTES

    big = b"#!/bin/sh\nrun\n" + (b"# " + b"x" * 1000 + b"\n") * (MAX_READ_BYTES // 1000 + 1)
    assert workload_text(big) == big
    small = b"#!/bin/sh\nrun\n" + (b"# " + b"x" * 1000 + b"\n") * 8
    assert workload_text(small) == b"#!/bin/sh\nrun"
