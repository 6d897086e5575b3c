"""The Debian roots of other Slurm releases: what can be checked without building one."""
from __future__ import annotations

import pytest

from slurm_plugin.cli.slurm_choice import _strip_slurm
from slurm_plugin.devcluster import roots
from slurm_plugin.devcluster.spec import cgroup_conf


def _fake_root(tmp_path, header_hex: str | None = None, dpkg_version: str | None = None):
    if header_hex:
        inc = tmp_path / "usr/include/slurm"
        inc.mkdir(parents=True)
        (inc / "slurm_version.h").write_text(f"#ifndef X\n#define SLURM_VERSION_NUMBER 0x{header_hex}\n")
    if dpkg_version:
        status = tmp_path / "var/lib/dpkg"
        status.mkdir(parents=True)
        (status / "status").write_text(
            "Package: munge\nStatus: install ok installed\nVersion: 0.5.15-2\n\n"
            f"Package: slurmctld\nStatus: install ok installed\nVersion: {dpkg_version}\n\n"
        )
    return tmp_path


def test_release_from_libslurm_dev_header(tmp_path):
    assert roots.installed_release(_fake_root(tmp_path, header_hex="180b05")) == "24.11.5"


def test_release_from_dpkg_when_no_header(tmp_path):
    assert roots.installed_release(_fake_root(tmp_path, dpkg_version="22.05.8-4+deb12u3")) == "22.05.8"


def test_no_slurm_no_release(tmp_path):
    assert roots.installed_release(tmp_path) is None


def test_unknown_series_says_which_are_known():
    with pytest.raises(roots.RootError, match="22.05, 24.11, 26.05"):
        roots.for_series("23.02")


def test_series_of_the_host_needs_no_root(monkeypatch):
    monkeypatch.setattr(roots, "host_series", lambda: "24.11")
    assert roots.for_series("24.11") is None
    assert roots.for_series(None) is None
    other = roots.for_series("26.05")
    assert other is not None and other.suite == "sid" and other.path.name == "sid"


def test_ports_differ_between_releases_and_from_the_hosts():
    from slurm_plugin.devcluster import ports

    used = [*roots.PORTS.values(), 16817]
    assert len(set(used)) == len(used)
    # a cluster uses up to port + 499 (srun's range): no two dev clusters' ranges overlap, and
    # no test run's block of ports overlaps any of them
    ranges = sorted(used)
    assert min(b - a for a, b in zip(ranges, ranges[1:])) >= 500
    for base in ports.candidate_bases():
        assert not any(base < p + 500 and p < base + ports.BLOCK for p in used)


def test_root_environment_is_clean_but_keeps_gpupack_settings(monkeypatch):
    monkeypatch.delenv("GPUPACK_DEVCLUSTER_PORT", raising=False)  # set when this runs in a root
    monkeypatch.setenv("GPUPACK_TEST_CLUSTER_PORT", "12345")  # a port the caller chose
    monkeypatch.setenv("LD_PRELOAD", "/host/only.so")
    root = roots.SlurmRoot("24.11", "trixie", roots.ROOTS_DIR / "trixie")
    env = roots.root_env(root)
    assert env["GPUPACK_TEST_CLUSTER_PORT"] == "12345"  # the caller's choice wins
    assert env["GPUPACK_DEVCLUSTER_PORT"] == "26817"
    assert "LD_PRELOAD" not in env
    assert env["PATH"].startswith(roots.VENV + "/bin:")
    assert env["PYTHONPATH"] == str(roots.REPO)


def test_wrappers_run_the_roots_own_command_in_the_callers_folder(tmp_path):
    root = roots.SlurmRoot("26.05", "sid", tmp_path / "sid")
    roots.write_wrappers(root)
    text = (root.bin_dir / "sbatch").read_text()
    assert f"exec chroot {root.path} " in text and "/usr/bin/sbatch" in text and '"$PWD"' in text
    assert (root.bin_dir / "squeue").stat().st_mode & 0o111


def test_python_requirements_come_from_pyproject():
    reqs = roots.python_requirements()
    assert any(r.startswith("click") for r in reqs) and any(r.startswith("pytest") for r in reqs)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--slurm", "24.11", "devcluster", "up"], ["devcluster", "up"]),
        (["devcluster", "up", "--slurm=26.05", "--nodes", "2"], ["devcluster", "up", "--nodes", "2"]),
        (["root", "run", "--slurm", "24.11", "--", "echo", "--slurm", "x"], ["root", "run", "--", "echo", "--slurm", "x"]),
    ],
)
def test_the_slurm_option_is_taken_out_before_running_again(argv, expected):
    assert _strip_slurm(argv) == expected


def test_cgroup_conf_by_release():
    assert "CgroupPlugin=disabled" in cgroup_conf((24, 11, 5))
    settings = [line for line in cgroup_conf((22, 5, 8)).splitlines() if not line.startswith("#")]
    assert settings == []  # 22.05 refuses `disabled` and autodetects


def test_a_mount_of_a_checkout_made_again_is_stale(tmp_path):
    from slurm_plugin.devcluster.roots import _stale

    checkout = tmp_path / "main"
    checkout.mkdir()
    assert not _stale(str(checkout), checkout)  # what a live bind mount shows: the same folder
    other = tmp_path / "other"
    other.mkdir()
    assert _stale(str(checkout), other)  # a deleted and re-cloned checkout: another inode
    assert _stale(str(tmp_path / "gone"), checkout)


def test_a_root_has_what_accounting_needs():
    """slurmdbd and MariaDB come with the root's build, not from the network at a test's start."""
    from slurm_plugin.devcluster.accounting import PACKAGES

    assert set(PACKAGES) <= set(roots.wanted_packages())
