#!/usr/bin/env python3
"""Read-only checks of the agent's NVML code path against the real GPUs of this machine.

It changes no GPU setting: no MIG mode change, no instance created or destroyed, no reset,
no compute-mode change. It only reads, through the same modules the node agent uses
(:mod:`gpus.nvml.backend` and its parts), and starts one ordinary CUDA process of its own
(a load, when PyTorch is there) so that per-process memory, utilisation and the
pid-to-job attribution can be read from something real.

What it prints (JSON, one object):

- ``gpus``: NVML's list as the agent sees it (index, UUID, name, model, memory, MIG mode),
  the driver and NVML versions, compute mode;
- ``catalog``: per GPU, the static MIG table the suite would use for that name, and where
  MIG mode is on, the catalogue read from NVML and its differences from the table; where it
  is off, what NVML answers to a profile-info read (read-only);
- ``load``: the load process's pid, what it allocated, and what NVML reported for it:
  ``process_memory`` (usedGpuMemory by pid), ``process_utilization`` samples, the device's
  utilisation rates, and whether the pid NVML gives is the one this machine's /proc knows
  (its environment carries the job id the load was given, as a Slurm job's would).

Usage: ``python3 scripts/nvml-readonly-check.py [--load-gib 5] [--load-s 12] [--json OUT]``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mig.errors import MigError  # noqa: E402
from gpus.nvml.backend import NvmlBackend  # noqa: E402
from gpus.nvml.catalog import static_catalog  # noqa: E402
from gpus.nvml.session import text  # noqa: E402

JOB_ID_MARK = "424242"  # the job id the load process carries in SLURM_JOB_ID

LOAD = r"""
import os, sys, time, torch
gib, secs = float(sys.argv[1]), float(sys.argv[2])
x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1)
a = torch.randn(8192, 8192, device="cuda")
print(f"ready {os.getpid()}", flush=True)
end = time.time() + secs
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
print("done", flush=True)
"""


def attempt(fn, *args):
    """(value, None) or (None, 'ErrorClass: message'): every check is reported, none stops the run."""
    try:
        return fn(*args), None
    except (MigError, OSError, ValueError, AttributeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - pynvml's NVMLError classes are made at run time
        return None, f"{type(exc).__name__}: {exc}"


def gpu_facts(backend: NvmlBackend) -> dict:
    nv = backend.nv
    gpus, err = attempt(backend.list_gpus)
    out: dict = {"error": err, "gpus": [g.to_dict() for g in gpus or []]}
    out["driver"], _ = attempt(lambda: text(nv.nvmlSystemGetDriverVersion()))
    out["nvml"], _ = attempt(lambda: text(nv.nvmlSystemGetNVMLVersion()))
    for g in out["gpus"]:
        h = backend.session.handle(g["index"])
        g["compute_mode"], g["compute_mode_error"] = attempt(nv.nvmlDeviceGetComputeMode, h)
        # /dev/nvidia<minor>: names the GPU in the driver's MIG capability files (the fence)
        g["device_minor"], g["device_minor_error"] = attempt(backend.device_minor, g["index"])
        mem, g["memory_error"] = attempt(nv.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            g["memory_used_mib"] = int(mem.used) // 2**20
            g["memory_total_mib"] = int(mem.total) // 2**20
    return out


def catalog_facts(backend: NvmlBackend, gpus: list[dict]) -> list[dict]:
    out = []
    for g in gpus:
        static = static_catalog(g["name"])
        entry: dict = {"index": g["index"], "name": g["name"],
                       "static_table": static.model if static else None,
                       "static_profiles": [p.name for p in static.profiles] if static else None}
        if g.get("mig_enabled"):
            cat, entry["nvml_error"] = attempt(backend.read_catalog, g["index"])
            if cat is not None:
                entry["nvml_profiles"] = [
                    {"name": p.name, "id": p.profile_id, "memory_mib": p.memory_mib,
                     "memory_slices": p.memory_slices, "max_instances": p.max_instances,
                     "placements": list(p.placement_starts)} for p in cat.profiles]
            inst, entry["instances_error"] = attempt(backend.list_instances, g["index"])
            entry["instances"] = [i.to_dict() for i in inst or []]
        else:
            # MIG is off: profile-info reads are still reads; record what NVML answers for
            # every profile index (the sizes the suite would plan shares with)
            entry["profiles_mig_off"] = profiles_mig_off(backend, g["index"])
        out.append(entry)
    return out


def profiles_mig_off(backend: NvmlBackend, index: int) -> list[dict]:
    nv = backend.nv
    h = backend.session.handle(index)
    out = []
    for k in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info, err = attempt(nv.nvmlDeviceGetGpuInstanceProfileInfo, h, k)
        row: dict = {"index": k, "error": err}
        if info is not None:
            row.update(id=int(info.id), memory_mib=int(info.memorySizeMB), slices=int(info.sliceCount),
                       instances=int(info.instanceCount), sms=int(info.multiprocessorCount))
            v, row["name_error"] = attempt(nv.nvmlDeviceGetGpuInstanceProfileInfoV, h, k)
            if v is not None:
                row["name"] = text(getattr(v, "name", b""))
            places, row["placements_error"] = attempt(
                backend._reader._possible_placements, h, index, info)  # noqa: SLF001 - the agent's own reader
            if places is not None:
                row["placements"] = places
        out.append(row)
    return out


def environ_job(pid: str) -> tuple[str | None, str | None]:
    """SLURM_JOB_ID from /proc/PID/environ, as the agent's environment attribution reads it."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    for item in raw.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            return item.split(b"=", 1)[1].decode(), None
    return None, "no SLURM_JOB_ID in its environment"


def load_facts(backend: NvmlBackend, gib: float, secs: float) -> dict:
    env = {**os.environ, "SLURM_JOB_ID": JOB_ID_MARK}
    try:
        proc = subprocess.Popen([sys.executable, "-c", LOAD, str(gib), str(secs)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        return {"error": f"could not start the load: {exc}"}
    first = proc.stdout.readline().strip() if proc.stdout else ""
    if not first.startswith("ready"):
        proc.kill()
        return {"error": f"the load did not start: {first!r} {proc.stderr.read()[-800:] if proc.stderr else ''}"}
    out: dict = {"pid_local": proc.pid, "pid_self_reported": first.split()[1], "allocated_gib": gib}
    since_us = int(time.time() * 1e6)
    time.sleep(min(4.0, secs / 2))
    mem, out["process_memory_error"] = attempt(backend.process_memory, 0)
    out["process_memory"] = [m.to_dict() for m in mem or []]
    util, out["process_utilization_error"] = attempt(backend.process_utilization, 0, since_us)
    out["process_utilization"] = [u.to_dict() for u in (util or [])][-10:]
    nv = backend.nv
    rates, out["device_utilization_error"] = attempt(nv.nvmlDeviceGetUtilizationRates, backend.session.handle(0))
    if rates is not None:
        out["device_utilization"] = {"gpu_pct": int(rates.gpu), "memory_pct": int(rates.memory)}
    mps, out["mps_processes_error"] = attempt(nv.nvmlDeviceGetMPSComputeRunningProcesses, backend.session.handle(0))
    out["mps_processes"] = [int(p.pid) for p in mps or []]
    pids = {m["owner"] for m in out["process_memory"]}
    out["nvml_pids"] = sorted(pids)
    out["pid_matches_local"] = str(proc.pid) in pids
    out["attribution"] = {pid: dict(zip(("job_id", "error"), environ_job(pid))) for pid in pids}
    proc.wait(timeout=secs + 60)
    out["load_exit"] = proc.returncode
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load-gib", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=12.0)
    ap.add_argument("--no-load", action="store_true", help="skip the CUDA load process")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    backend = NvmlBackend()
    try:
        result = {"taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        result.update(gpu_facts(backend))
        result["catalog"] = catalog_facts(backend, result["gpus"])
        if not args.no_load and result["gpus"]:
            result["load"] = load_facts(backend, args.load_gib, args.load_s)
    finally:
        backend.close()
    text_out = json.dumps(result, indent=2, default=str)
    print(text_out)
    if args.json:
        args.json.write_text(text_out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
