"""A stand-in for DCGM's ``dcgmi`` on the dev cluster's simulated GPUs.

Run in its place (gpupack.toml ``[agent] dcgmi``: ``python3 -m gpus.sim.dcgmi --sim-dir DIR``;
the node is ``--node``, else the host's name, as each dev-cluster node has its own), it
answers the two commands the agent runs, in dcgmi's output format (:mod:`gpus.dcgm.output`),
from the simulated GPU's shared state:

- ``discovery -c``: the MIG hierarchy. GPU entity ids are the GPU indexes; GPU instances
  and compute instances are numbered in order over the node's GPUs (as DCGM numbers its
  entities, so DCGM's id is not NVML's GPU instance id);
- ``dmon -e 1001 [-d MS] [-c N] -i i:<id>,...``: DCGM_FI_PROF_GR_ENGINE_ACTIVE of each GPU
  instance every ``-d`` milliseconds (``N/A`` once the instance is gone), the header again
  every 14 rows; ``-c`` rows, else until stopped. Each entity is resolved when the monitor
  starts, as a DCGM group is.

It refuses what dcgmi refuses: another field (the stand-in has only 1001), an entity id
that is no GPU instance (a GPU not in MIG mode has none), no host engine (here: no
simulated GPU state for the node). The messages are the stand-in's own, not DCGM's.
"""
from __future__ import annotations

import argparse
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpus.dcgm.output import HIERARCHY_HEADER, NA
from mig.errors import MigError

STAND_IN = f"{sys.executable} -m gpus.sim.dcgmi"  # + --sim-dir DIR: [agent] dcgmi on the dev cluster
GR_ENGINE_ACTIVE = 1001
HEADER_EVERY = 14  # rows between two headers (dcgmi's MAX_PRINT_HEADER_COUNT)
NO_ENGINE = ("Error: unable to establish a connection to the specified host: localhost\n"
             "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")


class Refused(Exception):
    """What dcgmi would print as an error (and exit non-zero)."""


@dataclass(frozen=True)
class SimGi:
    entity_id: int
    gpu_index: int
    gi_id: int
    uuid: str  # its MIG device's, to know it again ("" without one)


def open_gpu(sim_dir: Path, node: str):
    from gpus.sim.backend import SimGpuBackend

    try:
        return SimGpuBackend(sim_dir, node, read_only=True)
    except MigError as exc:
        raise Refused(NO_ENGINE) from exc


def hierarchy(gpu) -> tuple[list[tuple[int, str]], list[SimGi]]:
    """([(GPU index, UUID) of each GPU in MIG mode with instances], [its GPU instances])."""
    gpus, gis = [], []
    for g in gpu.list_gpus():
        instances = sorted(gpu.list_instances(g.index), key=lambda i: i.gi_id) if g.mig_enabled else []
        if instances:
            gpus.append((g.index, g.uuid))
        for inst in instances:
            gis.append(SimGi(len(gis), g.index, inst.gi_id, inst.uuid or ""))
    return gpus, gis


def _row(key: str, value: str) -> str:
    return f"| {key:<18}| {value:<67}|"


def discovery(gpu) -> str:
    border = "+" + "-" * 19 + "+" + "-" * 68 + "+"
    lines = [border, f"| {HIERARCHY_HEADER:<87}|", border.replace("-", "=")]
    gpus, gis = hierarchy(gpu)
    for index, uuid in gpus:
        lines.append(_row(f"GPU {index}", f"GPU {uuid} (EntityID: {index})"))
        for gi in (x for x in gis if x.gpu_index == index):
            lines.append(_row(f"-> I {index}/{gi.gi_id}", f"GPU Instance (EntityID: {gi.entity_id})"))
            lines.append(_row(f"   -> CI {index}/{gi.gi_id}/0", f"Compute Instance (EntityID: {gi.entity_id})"))
        lines.append(border)
    if not gpus:
        lines.append(border)
    return "\n".join(lines) + "\n"


def watched(gpu, spec: str) -> list[SimGi]:
    """The GPU instances of ``-i i:<id>,...``, resolved now."""
    _, gis = hierarchy(gpu)
    by_id = {g.entity_id: g for g in gis}
    out = []
    for item in spec.split(","):
        kind, _, number = item.strip().rpartition(":")
        if kind.lower() not in ("i", "instance") or not number.isdigit():
            raise Refused(f"Error: invalid entity {item!r}: the stand-in watches GPU instances only (i:<id>)")
        if int(number) not in by_id:
            raise Refused(f"Error: entity GPU-I {number} not found: no such GPU instance "
                          f"(dcgmi discovery -c lists {sorted(by_id) or 'none'})")
        out.append(by_id[int(number)])
    return out


def header() -> str:
    return f"{'#Entity':<16}{'GRACT':<13}\n{'ID':<16}{'':<13}"


def values(gpu, gis: list[SimGi]) -> list[str]:
    now: dict[str, float] = {}
    for index in sorted({g.gpu_index for g in gis}):
        try:
            now.update({a.device_uuid: a.gr_active for a in gpu.instance_activity(index)})
        except MigError:
            pass  # MIG turned off since: every instance of it is gone
    return [f"{f'GPU-I {g.entity_id}':<16}{(f'{now[g.uuid]:.3f}' if g.uuid in now else NA):<13}" for g in gis]


def dmon(gpu, fields: str, entities: str, delay_ms: int, count: int) -> None:
    if [f.strip() for f in fields.split(",")] != [str(GR_ENGINE_ACTIVE)]:
        raise Refused(f"Error: field ids {fields}: the stand-in has DCGM_FI_PROF_GR_ENGINE_ACTIVE (1001) only")
    gis = watched(gpu, entities)
    print(header(), flush=True)
    n = 0
    while True:
        print("\n".join(values(gpu, gis)), flush=True)
        n += 1
        if count and n >= count:
            return
        time.sleep(delay_ms / 1000.0)
        if n % HEADER_EVERY == 0:
            print(header(), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpus.sim.dcgmi", description=__doc__.split("\n\n")[0])
    p.add_argument("--sim-dir", type=Path, required=True, help="The simulated GPUs' folder.")
    p.add_argument("--node", default=None, help="The node [default: the host's name].")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("discovery")
    d.add_argument("-c", "--compute-hierarchy", action="store_true", required=True)
    m = sub.add_parser("dmon")
    m.add_argument("-e", "--field-id", required=True)
    m.add_argument("-i", "--entity-id", required=True)
    m.add_argument("-d", "--delay", type=int, default=1000)
    m.add_argument("-c", "--count", type=int, default=0)
    args = p.parse_args(argv)
    node = args.node or socket.gethostname().split(".")[0]
    try:
        gpu = open_gpu(args.sim_dir, node)
        if args.command == "discovery":
            sys.stdout.write(discovery(gpu))
        else:
            dmon(gpu, args.field_id, args.entity_id, max(1, args.delay), args.count)
    except Refused as exc:
        print(exc, flush=True)
        return 1
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
