"""A daemon that cannot load what it needs refuses to start, with one line naming what is
missing; a MIG profile the catalogue does not hold is said, not swallowed."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_plugin.helper.watches import memory
from slurm_plugin.helper.watches.tracks import Track
from slurm_plugin.startup import MissingDependency, require

REPO = Path(__file__).resolve().parents[3]


def test_require_names_the_missing_module_and_the_fix(tmp_path, monkeypatch):
    (tmp_path / "needs_a_library.py").write_text("import no_such_library_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingDependency) as exc:
        require("the gpupack watcher", ["json", "needs_a_library"])
    text = str(exc.value)
    assert "the gpupack watcher cannot start" in text and "'no_such_library_here'" in text
    assert "needs_a_library" in text and "install-deps.sh" in text


@pytest.mark.parametrize("role", ["watch", "all"])
def test_the_helper_refuses_to_start_without_statsmodels(tmp_path, role):
    """Before: the watcher ran with its memory forecasts failing each round (seen: every
    run-time action silently off). Now: exit status 1 and an `Error:` line, before any socket."""
    config = tmp_path / "gpupack.toml"
    config.write_text(f'[paths]\ndatabase = "{tmp_path}/db"\nsocket = "{tmp_path}/helper.sock"\n'
                      f'[metrics]\nsubmit_port = 0\nwatch_port = 0\n')
    stub = tmp_path / "stub" / "statsmodels"  # first on the path: this process and any it starts
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('no statsmodels here', name='statsmodels')\n")
    code = ("from slurm_plugin.cli import main\n"
            f"main(['helper', '--role', '{role}', '--config', '{config}'], prog_name='gpupack')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub.parent), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Error: gpupack helper --role " + role + " cannot start: 'statsmodels" in done.stderr
    assert not (tmp_path / "helper.sock").exists()


def test_the_submit_side_checks_the_watchers_libraries_without_keeping_them():
    """Role `all` checks what its watcher will load in a child process: the submit side, which
    answers slurmctld, stays free of statsmodels and scipy (about 70 MiB)."""
    code = ("import sys\n"
            "from slurm_plugin.startup import WATCHER_MODULES, require_in_child\n"
            "require_in_child('the check', WATCHER_MODULES)\n"
            "print(sorted(m for m in ('statsmodels', 'scipy', 'slurm_plugin.helper.monitor') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_mig_profile_the_catalogue_does_not_hold_is_logged_once_and_shares_are_used(caplog):
    track = Track(job_id=7, fingerprint=None, node="n1", gpu_index=0, isolation="mig:9g.99gb@0",
                  started_at=0.0, shards=2)
    with caplog.at_level(logging.ERROR):
        first = memory.capacity_of(track, 10.0, "H100-80GB")
        again = memory.capacity_of(track, 10.0, "H100-80GB")
    assert first == again == 20.0
    (record,) = [r for r in caplog.records if "9g.99gb" in r.getMessage()]
    assert "job 7" in record.getMessage() and "H100-80GB" in record.getMessage()
