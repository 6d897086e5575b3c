"""Other Slurm releases than the host's, each from a Debian root the project builds itself.

A release series maps to the Debian suite that ships it (`SUITES`). The root is made once
with `debootstrap --variant=minbase`, then gets that suite's Slurm, munge, Lua and Python
packages from Debian, and whatever the project's Python requirements need beyond them
from PyPI (pip inside the root, with the host's certificate bundle). It is kept between
runs under `ROOTS_DIR/<suite>` and rebuilt only when asked (`--rebuild`) or broken (its
stamp missing, or its Slurm or Python unable to run). When the package lists change, the
packages are brought up to date without a new debootstrap.

Commands run inside a root through `chroot`, with `/proc`, `/sys`, `/dev` and the
repository (and `../shared` beside it) bind-mounted at the same paths, so the same
checkout runs on every release. The mounts stay while the root's daemons run; `unmount`
takes them away.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: Slurm release series -> the Debian suite that ships it.
SUITES: dict[str, str] = {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
#: slurmctld's port for the dev cluster of a root (the host keeps 16817), so clusters of several
#: releases can run side by side; test runs claim free ports of their own (devcluster.ports).
PORTS: dict[str, int] = {"24.11": 26817, "26.05": 36817, "22.05": 46817}
ROOTS_DIR = Path(os.environ.get("GPUPACK_ROOTS_DIR", "/var/lib/gpupack/roots"))
MIRROR = os.environ.get("GPUPACK_DEBIAN_MIRROR", "http://deb.debian.org/debian")
REPO = Path(__file__).resolve().parents[2]
STAMP = ".gpupack-root.json"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
ROOT_CA = "/etc/gpupack/host-ca.crt"
#: A virtual environment over Debian's Python packages: pip adds or shadows there what they
#: do not satisfy, and never has to remove a package Debian installed.
VENV = "/opt/gpupack-venv"

#: Debian packages inside a root: Slurm and its node side, the shim's Lua, the SPANK build,
#: and the Python libraries Debian ships (pip adds only what these do not satisfy).
DEBIAN_PACKAGES = [
    "slurmctld", "slurmd", "slurm-client", "munge", "libslurm-dev", "lua-socket", "liblua5.1-0", "lua5.1",
    "gcc", "make", "libc6-dev", "procps", "ca-certificates", "iproute2", "util-linux",
    "python3", "python3-pip", "python3-venv", "python3-click", "sqlite-utils", "python3-prometheus-client", "python3-numpy", "python3-scipy", "python3-statsmodels",
    "python3-pytest", "python3-pytest-mock", "python3-pytest-xdist", "python3-hypothesis", "python3-matplotlib",
    "mariadb-server", "slurmdbd",  # `devcluster up --accounting` (devcluster.accounting.PACKAGES)
]
#: Extra Debian packages a feature's tests need (a browser for the web view's tests, say).
EXTRA_PACKAGES_FILE = REPO / "scripts" / "root-packages.txt"


class RootError(RuntimeError):
    """A Debian root cannot be built or entered; the message says what to do."""


@dataclass(frozen=True)
class SlurmRoot:
    series: str
    suite: str
    path: Path

    @property
    def stamp(self) -> Path:
        return self.path / STAMP

    @property
    def bin_dir(self) -> Path:
        """Host-side `sbatch`, `squeue`, … that run this release's commands in the root."""
        return self.path.parent / f"bin-{self.series}"

    @property
    def dev_port(self) -> int:
        return PORTS[self.series]

    def info(self) -> dict | None:
        try:
            return json.loads(self.stamp.read_text())
        except (OSError, ValueError):
            return None


def host_series() -> str | None:
    """The Slurm series installed on this host ("22.05"), or None without Slurm."""
    release = installed_release(Path("/"))
    return ".".join(release.split(".")[:2]) if release else None


def installed_release(root: Path) -> str | None:
    """The Slurm release installed under ``root`` ("24.11.5"): libslurm-dev's header, else dpkg's."""
    try:
        for line in (root / "usr/include/slurm/slurm_version.h").read_text().splitlines():
            if line.startswith("#define SLURM_VERSION_NUMBER"):
                v = int(line.split()[2], 16)
                return f"{v >> 16}.{(v >> 8) & 255:02d}.{v & 255}"
    except (OSError, IndexError, ValueError):
        pass
    try:
        for block in (root / "var/lib/dpkg/status").read_text(errors="replace").split("\n\n"):
            if block.startswith("Package: slurmctld\n") and "Status: install ok installed" in block:
                version = block.split("\nVersion: ", 1)[1].split("\n", 1)[0]
                return version.split(":")[-1].split("-")[0]
    except (OSError, IndexError):
        pass
    return None


def check_series(series: str) -> str:
    if series not in SUITES:
        known = ", ".join(sorted(SUITES))
        raise RootError(f"no Debian suite known for Slurm {series!r}; choose one of {known}")
    return series


def for_series(series: str | None) -> SlurmRoot | None:
    """The root that provides ``series``, or None when the host's own Slurm does."""
    if not series or series == "host":
        return None
    check_series(series)
    if series == host_series():
        return None
    return SlurmRoot(series, SUITES[series], ROOTS_DIR / SUITES[series])


# -- building ---------------------------------------------------------------------------------
def wanted_packages() -> list[str]:
    extra: list[str] = []
    if EXTRA_PACKAGES_FILE.exists():
        for line in EXTRA_PACKAGES_FILE.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                extra.append(line)
    return DEBIAN_PACKAGES + extra


def python_requirements() -> list[str]:
    """The project's requirements with its `test` and `plots` extras, from pyproject.toml."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra in ("test", "plots"):
        reqs += project.get("optional-dependencies", {}).get(extra, [])
    return reqs


def _recipe_hash() -> str:
    text = json.dumps([wanted_packages(), python_requirements()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def is_healthy(root: SlurmRoot) -> bool:
    paths = ("usr/sbin/slurmctld", "usr/sbin/slurmd", "usr/bin/python3", f"{VENV.lstrip('/')}/bin/python3")
    return all((root.path / p).exists() for p in paths) and installed_release(root.path) is not None


def ensure(root: SlurmRoot, *, rebuild: bool = False) -> dict:
    """Build ``root`` if it is missing, broken or asked to; update its packages if stale."""
    if os.geteuid() != 0:
        raise RootError("building a Debian root needs root (debootstrap, chroot, mount)")
    if rebuild or not (root.path / "usr/bin/apt-get").exists():
        _debootstrap(root)
    elif not is_healthy(root) and root.info():
        log.warning("the %s root at %s is broken: building it anew", root.suite, root.path)
        _debootstrap(root)
    info = root.info() or {}
    if info.get("recipe") != _recipe_hash():
        _install_packages(root)
        release = installed_release(root.path)
        py = _in_root_output(root, ["python3", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        info = {"series": root.series, "suite": root.suite, "slurm": release, "python": py.strip(),
                "recipe": _recipe_hash(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if release is None or not release.startswith(root.series + "."):
            raise RootError(
                f"Debian {root.suite} now ships Slurm {release}, not {root.series}: the mirror moved on"
            )
        root.stamp.write_text(json.dumps(info, indent=1) + "\n")
    write_wrappers(root)
    return info


CLIENT_COMMANDS = ("sbatch", "squeue", "scontrol", "sinfo", "scancel", "sacct", "srun", "salloc", "sprio", "sdiag", "sstat")


def write_wrappers(root: SlurmRoot) -> None:
    """One small script per Slurm client command, running the root's own in the caller's folder.

    `gpupack devcluster env --slurm V` puts them first in PATH, so plain `sbatch job.sh`
    reaches that release's cluster (a job script must lie where the root sees it too: the
    repository, /tmp of the root, or stdin)."""
    root.bin_dir.mkdir(parents=True, exist_ok=True)
    for name in CLIENT_COMMANDS:
        script = (
            "#!/bin/sh\n"
            f"# Slurm {root.series}'s {name}, from the Debian {root.suite} root (gpupack devcluster env --slurm {root.series})\n"
            f"exec chroot {root.path} /bin/sh -c 'cd \"$0\" 2>/dev/null || cd /; exec \"$@\"' \"$PWD\" /usr/bin/{name} \"$@\"\n"
        )
        path = root.bin_dir / name
        path.write_text(script)
        path.chmod(0o755)


def _debootstrap(root: SlurmRoot) -> None:
    if not shutil.which("debootstrap"):
        _apt_host(["debootstrap"])
    unmount(root)
    if root.path.exists():
        left = _mounts_under(root.path)
        if left:  # never delete through a bind mount: the checkout is mounted in there
            raise RootError(f"cannot rebuild {root.path}: still mounted there: {', '.join(left)}; "
                            f"stop its clusters (gpupack devcluster down --slurm {root.series}) and unmount them")
        log.warning("removing the old root %s", root.path)
        shutil.rmtree(root.path)
    root.path.parent.mkdir(parents=True, exist_ok=True)
    log.warning("building a Debian %s root for Slurm %s in %s", root.suite, root.series, root.path)
    tmp = root.path.with_name(root.path.name + ".new")
    if tmp.exists():
        shutil.rmtree(tmp)
    result = subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=ca-certificates", root.suite, str(tmp), MIRROR],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-1500:]
        raise RootError(f"debootstrap {root.suite} failed (the mirror may have moved on):\n{tail}")
    # the packaged daemons must not start inside the root: the dev cluster runs its own
    policy = tmp / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    tmp.rename(root.path)


def _install_packages(root: SlurmRoot) -> None:
    apt = ["apt-get", "-o", "Acquire::Check-Valid-Until=false", "-o", "Dpkg::Use-Pty=0"]
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    for argv in (apt + ["update", "-qq"], apt + ["install", "-y", "-qq", "--no-install-recommends", *wanted_packages()]):
        result = run_in(root, argv, env=env, capture=True, mount_repo=False)
        if result.returncode != 0:
            raise RootError(f"{' '.join(argv[:4])} … in the {root.suite} root failed:\n{result.stdout[-1500:]}{result.stderr[-1500:]}")
    ca = root.path / ROOT_CA.lstrip("/")
    ca.parent.mkdir(parents=True, exist_ok=True)
    if Path(HOST_CA).exists():
        shutil.copyfile(HOST_CA, ca)
    # Debian's own Python libraries where they satisfy the project; where one does not (an
    # older suite's numpy, say), pip's newer copy in the venv would break the Debian libraries
    # built against the old one, so the venv then takes everything from PyPI instead
    for system_site in (True, False):
        _make_venv(root, system_site)
        problem = _import_problem(root)
        if problem is None:
            return
        log.warning("the %s root's Python libraries do not load together (%s)%s", root.suite, problem,
                    ": making its venv from PyPI alone" if system_site else "")
    raise RootError(f"the {root.suite} root's Python libraries do not load: {problem}")


#: Modules that must import together in a root (the project's requirements and test tools).
IMPORT_CHECK = "import click, numpy, scipy, statsmodels.api, sqlite_utils, pynvml, pytest, xdist, hypothesis, matplotlib"


def _make_venv(root: SlurmRoot, system_site: bool) -> None:
    run_in(root, ["rm", "-rf", VENV], capture=True, mount_repo=False)
    argv = ["python3", "-m", "venv", *(["--system-site-packages"] if system_site else []), VENV]
    venv = run_in(root, argv, capture=True, mount_repo=False)
    if venv.returncode != 0:
        raise RootError(f"python3 -m venv in the {root.suite} root failed:\n{venv.stderr[-1500:]}")
    pip = [f"{VENV}/bin/python3", "-m", "pip", "install", "-q", "--root-user-action=ignore",
           "--disable-pip-version-check", *python_requirements()]
    pip_env = {"PIP_CERT": ROOT_CA, "PIP_DEFAULT_TIMEOUT": "120"}
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "HTTPS_PROXY", "https_proxy"):
        if os.environ.get(key):
            pip_env[key] = os.environ[key]
    result = run_in(root, pip, env=pip_env, capture=True, mount_repo=False)
    if result.returncode != 0:
        raise RootError(f"pip in the {root.suite} root failed:\n{result.stdout[-1500:]}{result.stderr[-1500:]}")


def _import_problem(root: SlurmRoot) -> str | None:
    result = run_in(root, [f"{VENV}/bin/python3", "-c", IMPORT_CHECK], capture=True, mount_repo=False)
    if result.returncode == 0:
        return None
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


def _apt_host(packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
    result = subprocess.run(["apt-get", "install", "-y", "-qq", *packages], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RootError(f"apt-get install {' '.join(packages)} failed:\n{result.stderr[-1500:]}")


# -- entering ---------------------------------------------------------------------------------
def _mounted(path: Path) -> bool:
    target = str(path)
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            if line.split()[4] == target:
                return True
    except (OSError, IndexError):
        pass
    return False


def _bind_points(root: SlurmRoot, mount_repo: bool) -> list[tuple[str, Path]]:
    points = [("/proc", root.path / "proc"), ("/sys", root.path / "sys"), ("/dev", root.path / "dev"),
              ("/dev/pts", root.path / "dev/pts")]
    if mount_repo and Path("/etc/hosts").is_file():
        # the machine's own names: slurmctld in the root must resolve the machine's hostname
        # (srun's host; seen unresolved on 24.11: steps stuck completing)
        points.append(("/etc/hosts", root.path / "etc/hosts"))
    if mount_repo:
        points.append((str(REPO), root.path / str(REPO).lstrip("/")))
        shared = REPO.parent / "shared"
        if shared.is_dir():
            points.append((str(shared), root.path / str(shared).lstrip("/")))
    return points


def _stale(source: str, target: Path) -> bool:
    """A bind mount of a checkout that was since deleted and made again (a fresh clone at the
    same path): the target still shows the old, deleted folder."""
    try:
        a, b = os.stat(source), os.stat(target)
    except OSError:
        return True
    return (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino)


def mount(root: SlurmRoot, *, mount_repo: bool = True) -> None:
    for source, target in _bind_points(root, mount_repo):
        if _mounted(target):
            if source in ("/proc", "/sys", "/dev", "/dev/pts") or not _stale(source, target):
                continue
            log.warning("%s in the %s root is an old copy of %s: mounting it again", target, root.suite, source)
            subprocess.run(["umount", "-l", str(target)], capture_output=True)
        if Path(source).is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.touch()  # a file is bound onto a file
        # /sys with what is mounted below it: slurmd 22.05 finds the host's /sys/fs/cgroup
        # there, as on the host (it knows no CgroupPlugin=disabled)
        how = "--rbind" if source == "/sys" else "--bind"
        result = subprocess.run(["mount", how, source, str(target)], capture_output=True, text=True)
        if result.returncode != 0:
            raise RootError(f"mount {how} {source} {target} failed: {result.stderr.strip()}")


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path) + "/"
    try:
        targets = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except (OSError, IndexError):
        return [f"{path} (mount table unreadable)"]
    return [t for t in targets if t.startswith(prefix)]


def unmount(root: SlurmRoot) -> list[str]:
    """Take away every mount under the root (deepest first); returns what was unmounted."""
    done = []
    for target in sorted(_mounts_under(root.path), key=len, reverse=True):
        if subprocess.run(["umount", "-l", target], capture_output=True).returncode == 0:
            done.append(target)
    return done


def root_env(root: SlurmRoot, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a command inside ``root``: a clean one, plus gpupack's settings."""
    dev_port = root.dev_port
    env = {
        "PATH": f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root", "LANG": "C.UTF-8", "TERM": os.environ.get("TERM", "dumb"),
        "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
        "GPUPACK_DEVCLUSTER_PORT": str(dev_port),
        "GPUPACK_ROOT": f"{root.suite} root {root.path}", "GPUPACK_ROOT_BIN": str(root.bin_dir),
    }
    for key, value in os.environ.items():  # the caller's own settings win (its ports too)
        if key.startswith(("GPUPACK_", "PYTEST_")) or key in ("CI", "SLURM_CONF", "PYTHONUNBUFFERED"):
            env[key] = value
    env.update(extra or {})
    return env


def run_in(root: SlurmRoot, argv: list[str], *, env: dict[str, str] | None = None, capture: bool = False,
           mount_repo: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` inside ``root`` (chroot), in ``cwd`` (default: the repository)."""
    mount(root, mount_repo=mount_repo)
    workdir = str(cwd or (REPO if mount_repo else Path("/")))
    inner = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', workdir, *argv]
    return subprocess.run(["chroot", str(root.path), *inner], env=root_env(root, env),
                          capture_output=capture, text=capture)


def _in_root_output(root: SlurmRoot, argv: list[str]) -> str:
    result = run_in(root, argv, capture=True, mount_repo=False)
    return result.stdout if result.returncode == 0 else ""


def describe() -> str:
    """Which Slurm this process runs on: 'slurm 24.11.5 (Debian trixie root /var/…/trixie)'."""
    where = os.environ.get("GPUPACK_ROOT") or "this host"
    return f"slurm {installed_release(Path('/')) or 'not installed'} ({where})"


def status(series: str) -> dict:
    root = for_series(series)
    if root is None:
        return {"series": series, "where": "host", "slurm": installed_release(Path("/"))}
    return {"series": series, "where": str(root.path), "healthy": is_healthy(root), **(root.info() or {})}


def exec_in(root: SlurmRoot, argv: list[str], env: dict[str, str] | None = None) -> int:
    """Run ``argv`` in ``root`` with this process's terminal; returns its exit code. An
    interrupt or SIGTERM sent to this process is passed on and its end waited for (a test run
    takes its clusters down), never answered by killing it."""
    sys.stdout.flush()
    mount(root)
    inner = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(REPO), *argv]
    return run_forwarding(["chroot", str(root.path), *inner], env=root_env(root, env))


def run_forwarding(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Run ``argv`` and wait for it, passing SIGINT, SIGTERM and SIGHUP on to it.

    `subprocess.run` answers an interrupt by killing its child (SIGKILL): a test run inside
    a root then leaves its clusters up. Here the child gets the signal and ends as it would
    alone; this process goes on waiting for it (from the main thread only, where Python
    can take signals)."""
    proc = subprocess.Popen(argv, env=env)
    if threading.current_thread() is not threading.main_thread():
        return proc.wait()

    def forward(signum: int, _frame) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    kept = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return proc.wait()
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)

