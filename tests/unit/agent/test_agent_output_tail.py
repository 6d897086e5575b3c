"""A job's output tail read as its user could (`slurm_plugin.agent.output_tail`): bounded, no
symbolic link followed but root's, only a regular file the job's user owns."""
from __future__ import annotations

import os
import threading

import pytest

from slurm_plugin.agent.output_tail import TAIL_BYTES, TailRefused, read_tail, read_tails

OTHER = 4321  # a uid that is not the test's (root's) own


def test_only_the_tail_is_read(tmp_path):
    f = tmp_path / "slurm-7.out"
    f.write_bytes(b"a" * (3 * TAIL_BYTES) + b"\nthe end\n")
    tail = read_tail(str(f), os.getuid())
    assert len(tail.text) == TAIL_BYTES and tail.text.endswith("the end\n") and tail.size == 3 * TAIL_BYTES + 9
    assert read_tail(str(f), os.getuid(), max_bytes=4).text == "end\n"


def test_a_short_file_is_read_whole(tmp_path):
    f = tmp_path / "out"
    f.write_text("short\n")
    assert read_tail(str(f), os.getuid()).text == "short\n"


def test_a_symbolic_link_as_the_file_is_refused_even_to_the_users_own_file(tmp_path):
    (tmp_path / "real").write_text("x")
    (tmp_path / "out").symlink_to(tmp_path / "real")
    with pytest.raises(TailRefused, match="symbolic link"):
        read_tail(str(tmp_path / "out"), os.getuid())


def test_a_file_another_user_owns_is_refused(tmp_path):
    f = tmp_path / "out"
    f.write_text("secret\n")
    os.chown(f, OTHER, OTHER)
    with pytest.raises(TailRefused, match=f"owned by uid {OTHER}"):
        read_tail(str(f), os.getuid())
    assert read_tail(str(f), OTHER).text == "secret\n"


def test_a_hard_link_to_a_file_of_root_is_refused_for_the_user(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:*:\n")
    os.link(secret, tmp_path / "out")
    with pytest.raises(TailRefused, match="not the job's user"):
        read_tail(str(tmp_path / "out"), OTHER)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    done: list[BaseException] = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(TailRefused, read_tail, str(fifo), 0).value))
    t.start()
    t.join(5)
    assert not t.is_alive() and done and "not a regular file" in str(done[0])


def test_a_folder_that_is_a_users_symbolic_link_is_refused_a_roots_is_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "out").write_text("ok\n")
    (tmp_path / "root-link").symlink_to(real)
    assert read_tail(str(tmp_path / "root-link" / "out"), os.getuid()).text == "ok\n"
    (tmp_path / "user-link").symlink_to(real)
    os.lchown(tmp_path / "user-link", OTHER, OTHER)
    with pytest.raises(TailRefused, match=f"symbolic link owned by uid {OTHER}"):
        read_tail(str(tmp_path / "user-link" / "out"), os.getuid())


@pytest.mark.parametrize("path", ["relative/out", "/tmp/../etc/out", "/", ""])
def test_paths_that_are_not_plain_absolute_ones_are_refused(path):
    with pytest.raises(TailRefused):
        read_tail(path, 0)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(TailRefused):
        read_tail(str(tmp_path / "none"), 0)


@pytest.mark.parametrize("uid", [-1, True, "0", None])
def test_a_bad_uid_is_an_error_not_a_guess(tmp_path, uid):
    with pytest.raises(ValueError):
        read_tail(str(tmp_path / "x"), uid)


def test_read_tails_skips_what_may_not_be_read_and_reads_a_path_once(tmp_path):
    (tmp_path / "err").write_text("e\n")
    (tmp_path / "link").symlink_to(tmp_path / "err")
    tails = read_tails([str(tmp_path / "err"), str(tmp_path / "link"), str(tmp_path / "err")], os.getuid())
    assert [t.path for t in tails] == [str(tmp_path / "err")]
