"""The submit path's memo of script identities gives the same fingerprint and level keys as
working them out afresh, tells scripts, names and users apart, and holds a bounded number."""
import pytest

from packer.fingerprint import fingerprint
from packer.identity_memo import IdentityMemo
from packer.workload_identity import workload_keys

SCRIPT = b"#!/bin/bash\n# sweep\npython3 train.py --lr 0.01\n"


def test_answers_are_those_of_the_functions_and_a_repeat_is_a_hit():
    memo = IdentityMemo()
    first = memo.of("ann", "train", SCRIPT)
    assert first.fingerprint == fingerprint("ann", "train", SCRIPT)
    assert first.keys(SCRIPT) == workload_keys("ann", "train", SCRIPT)
    again = memo.of("ann", "train", SCRIPT)
    assert again is first and (memo.hits, memo.misses) == (1, 1)


@pytest.mark.parametrize("other", [("bob", "train", SCRIPT), ("ann", "eval", SCRIPT),
                                   ("ann", "train", SCRIPT.replace(b"0.01", b"0.02"))])
def test_another_user_name_or_script_is_another_identity(other):
    memo = IdentityMemo()
    memo.of("ann", "train", SCRIPT)
    identity = memo.of(*other)
    assert identity.fingerprint == fingerprint(*other)
    assert identity.keys(other[2]) == workload_keys(*other)
    assert memo.misses == 2


def test_a_comment_edit_is_another_entry_with_the_same_fingerprint():
    memo = IdentityMemo()
    edited = SCRIPT.replace(b"# sweep", b"# sweep, second try")
    assert memo.of("ann", "train", edited).fingerprint == memo.of("ann", "train", SCRIPT).fingerprint
    assert len(memo) == 2


def test_it_holds_at_most_its_size_dropping_the_least_recently_used():
    memo = IdentityMemo(size=3)
    scripts = [SCRIPT + b"echo %d\n" % i for i in range(5)]
    for script in scripts[:3]:
        memo.of("ann", "train", script)
    memo.of("ann", "train", scripts[0])  # used again: kept
    for script in scripts[3:]:
        memo.of("ann", "train", script)
    assert len(memo) == 3
    hits = memo.hits
    memo.of("ann", "train", scripts[0])
    assert memo.hits == hits + 1
    memo.of("ann", "train", scripts[1])  # dropped: worked out again
    assert memo.hits == hits + 1


def test_a_memo_of_no_entries_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        IdentityMemo(size=0)
