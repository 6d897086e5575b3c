#!/bin/sh
# slurm.conf `EpilogSlurmctld=` on the controller host (slurmctld runs it as SlurmUser, for every job):
# tells the controller helper which job ended on which nodes (`gpupack ctld-epilog -h`;
# docs/history.md). Copy it to /usr/local/libexec/gpupack-ctld-epilog.sh (mode 0755).
# It runs the suite's interpreter in its virtual environment (GPUPACK_VENV, default
# /opt/gpupack/venv: README, install step 1), never the system's python3, and needs only the
# standard library there (slurm_plugin.ctld_epilog starts fast). It never fails: a failing
# EpilogSlurmctld would hold the job in COMPLETING.
GPUPACK_VENV=${GPUPACK_VENV:-/opt/gpupack/venv}
"$GPUPACK_VENV/bin/python3" -m slurm_plugin.ctld_epilog --config "${GPUPACK_CONFIG:-/etc/slurm/gpupack.toml}" || true
exit 0
