"""What the installed suite runs names its virtual environment's interpreter, never the system's
python3: the systemd units, the `EpilogSlurmctld`/`Epilog` scripts (run here, on a stand-in
venv, with no python3 on PATH), and the dev cluster's controller epilog's interpreter."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_plugin.devcluster.files import SYSTEM_PYTHON, ctld_python

ROOT = Path(__file__).resolve().parents[3]
ETC = ROOT / "etc"
VENV = "/opt/gpupack/venv"
SCRIPTS = {"gpupack-ctld-epilog.sh": "no job id or nodes", "gpupack-epilog.sh": "epilog: no job id or node name"}


@pytest.mark.parametrize("unit", sorted((ETC / "systemd").glob("*.service")), ids=lambda p: p.name)
def test_every_unit_starts_the_venvs_gpupack(unit: Path):
    starts = [line.split("=", 1)[1] for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    assert len(starts) == 1, starts
    assert starts[0].startswith(f"{VENV}/bin/gpupack "), starts[0]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_an_epilog_script_names_the_venvs_python_by_a_setting(name: str):
    text = (ETC / name).read_text()
    assert f"GPUPACK_VENV=${{GPUPACK_VENV:-{VENV}}}" in text
    commands = [line for line in text.splitlines() if line and not line.startswith("#")]
    runs = [line for line in commands if "slurm_plugin" in line]
    assert len(runs) == 1 and runs[0].startswith('"$GPUPACK_VENV/bin/python3" -m slurm_plugin'), runs
    assert not any(re.match(r"(\S+=\S+ )*(python3|gpupack)\b", line) for line in commands), commands
    assert "PYTHONPATH" not in "\n".join(commands)
    assert os.access(ETC / name, os.X_OK)


def _stand_in_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose bin/python3 notes that it ran, then runs this interpreter."""
    venv, ran = tmp_path / "venv", tmp_path / "ran"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python3"
    python.write_text(f'#!/bin/sh\necho "$@" >>"{ran}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return venv, ran


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_an_epilog_script_runs_the_suite_on_the_venvs_python_alone(name: str, tmp_path: Path):
    """Run as Slurm runs it, with a bare environment: no python3 on PATH, so only the venv's runs;
    outside a job it says so and exits 0."""
    venv, ran = _stand_in_venv(tmp_path)
    empty = tmp_path / "no-python-here"
    empty.mkdir()
    env = {"PATH": str(empty), "GPUPACK_VENV": str(venv), "GPUPACK_CONFIG": str(tmp_path / "gpupack.toml"),
           "PYTHONPATH": str(ROOT)}  # the stand-in venv has the suite through this checkout
    done = subprocess.run(["/bin/sh", str(ETC / name)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert SCRIPTS[name] in done.stderr
    assert "-m slurm_plugin" in ran.read_text()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_an_epilog_script_never_fails_without_its_venv(name: str, tmp_path: Path):
    env = {"PATH": "/usr/bin:/bin", "GPUPACK_VENV": str(tmp_path / "missing")}
    done = subprocess.run(["/bin/sh", str(ETC / name)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "missing/bin/python3" in done.stderr


def test_the_dev_clusters_controller_epilog_runs_the_clusters_python_where_slurmuser_may():
    # under /var/tmp, open to all: pytest's own tmp folder lies under a closed one (/tmp/pytest-of-root)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as name:
        top = Path(name)
        top.chmod(0o755)
        closed, open_ = top / "closed", top / "open"
        for folder, mode in ((closed, 0o700), (open_, 0o755)):
            folder.mkdir()
            (folder / "python3").write_text("#!/bin/sh\n")
            (folder / "python3").chmod(0o755)
            folder.chmod(mode)
        assert ctld_python("slurm", str(open_ / "python3")) == str(open_ / "python3")
        assert ctld_python("root", str(closed / "python3")) == str(closed / "python3")
        assert ctld_python("slurm", str(closed / "python3")) == SYSTEM_PYTHON
        # a venv's link into a closed folder is as closed as its target, and one in a closed folder too
        (open_ / "venv-python3").symlink_to(closed / "python3")
        assert ctld_python("slurm", str(open_ / "venv-python3")) == SYSTEM_PYTHON
        (closed / "venv-python3").symlink_to(open_ / "python3")
        assert ctld_python("slurm", str(closed / "venv-python3")) == SYSTEM_PYTHON
        (open_ / "python3").chmod(0o750)
        assert ctld_python("slurm", str(open_ / "python3")) == SYSTEM_PYTHON
