#!/bin/sh
# slurm.conf `Epilog=` on each GPU node (optional; slurmd runs it as root after each job): asks the
# node's agent to finish the job now, its summary ready and its MIG instance or MPS share freed
# (`gpupack epilog -h`). Copy it to /usr/local/libexec/gpupack-epilog.sh (mode 0755).
# It runs the suite's interpreter in its virtual environment (GPUPACK_VENV, default
# /opt/gpupack/venv: README, install step 1), never the system's python3. It never fails: a
# failing Epilog drains the node.
GPUPACK_VENV=${GPUPACK_VENV:-/opt/gpupack/venv}
"$GPUPACK_VENV/bin/python3" -m slurm_plugin epilog --config "${GPUPACK_CONFIG:-/etc/slurm/gpupack.toml}" || true
exit 0
