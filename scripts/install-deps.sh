#!/usr/bin/env bash
# Install what gpupack needs on Debian 12: Slurm 22.05 and munge from Debian's packages,
# Lua 5.1 + luasocket for the submit shim, a C toolchain for the SPANK plugin, headless
# Chromium and its driver for the web view's browser tests (Selenium drives Debian's own
# /usr/bin/chromium and /usr/bin/chromedriver; nothing downloads a browser), and the Python
# package with its test extras into a virtual environment (VENV, default .venv in the checkout,
# made with `python3 -m venv`; PYTHON, default $VENV/bin/python3), never the system's Python: a
# job's plain `python3` must not find the suite's modules. Safe to run again; skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
# One install at a time on a machine: two `make test` started together would otherwise run
# apt-get and pip over each other (pip removes and rewrites the same entry-point scripts).
exec 9>"${GPUPACK_DEPS_LOCK:-/tmp/gpupack-install-deps.lock}"
flock 9

PKGS=(slurmctld slurmd slurm-client munge libmunge2 libslurm-dev lua-socket liblua5.1-0 lua5.1 gcc make libc6-dev chromium chromium-driver)
PKGS+=(python3-venv)  # `python3 -m venv` (Debian's python3 has no ensurepip without it)
missing=()
PKGS+=(iproute2 util-linux)  # ip, unshare, nsenter: the multi-host dev cluster's hosts and bridge
PKGS+=(mariadb-server slurmdbd)  # `devcluster up --accounting` and the fair-share test (docs/accounting.md)
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages: ${missing[*]} (run as root, or apt-get install them)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts the packaged daemons on install; the dev cluster runs its own, on its own ports.
for svc in slurmctld slurmd munge slurmdbd mariadb; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl stop "$svc" || true
  fi
done

VENV=${VENV:-.venv}
PY=${PYTHON:-$VENV/bin/python3}
if [ "$PY" = "$VENV/bin/python3" ] && [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
"$PY" -m pip install -q --disable-pip-version-check -e '.[test,plots]'
