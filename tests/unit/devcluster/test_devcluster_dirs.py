"""The dev cluster's folders are owned and permissioned as Slurm's own: no world-writable
folder without the sticky bit (the log and simulated-GPU folders were 0777)."""
from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from slurm_plugin.devcluster.files import _make_dirs
from slurm_plugin.devcluster.spec import ClusterSpec


@pytest.mark.skipif(os.geteuid() != 0, reason="the folders are chowned to slurm and munge: needs root")
def test_no_folder_is_world_writable_without_the_sticky_bit(tmp_path):
    spec = ClusterSpec(state_dir=tmp_path / "dc", port=23999)
    _make_dirs(spec, "slurm")
    folders = [Path(root) for root, _dirs, _files in os.walk(spec.state_dir)]
    assert len(folders) >= 7
    for folder in folders:
        mode = folder.stat().st_mode
        assert not (mode & stat.S_IWOTH) or (mode & stat.S_ISVTX), f"{folder}: {oct(mode & 0o7777)}"
    assert pwd.getpwuid(spec.log.stat().st_uid).pw_name == "slurm"
    assert stat.S_IMODE(spec.log.stat().st_mode) == 0o755
    assert stat.S_IMODE(spec.simgpu_dir.stat().st_mode) == 0o1777
