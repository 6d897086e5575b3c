"""The real job_submit.lua, run by lua5.1 as slurmctld runs it, against the real helper service.

`ShimRig` copies the shim into a folder with its gpupack_shim.conf, serves a real
`SubmitService` on a Unix socket there (in this process), and runs job_desc tables through
`tests/data/job_desc/driver.lua`, which gives each one Slurm's field semantics for a release
(`settable.json`, read from job_submit_lua.c). No cluster: each batch is one lua5.1 process.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

from packer.config import PackerConfig
from packer.decision import ClusterView
from store.db import Store
from slurm_plugin.helper.server import HelperServer, Reply
from slurm_plugin.helper.submit_service import SubmitService
from fixed_view import FixedView

DATA = Path(__file__).resolve().parent / "data" / "job_desc"
RELEASES = ("22.05", "24.11", "26.05")
LUA = shutil.which("lua5.1")
NO_VAL = 0xFFFFFFFE


def recorded(release: str) -> dict:
    """The job_desc recording (or derivation) for `release`: {"source", "forms": {id: ...}}."""
    return json.loads((DATA / f"slurm-{release}.json").read_text())


def settable(release: str) -> dict[str, str]:
    return json.loads((DATA / "settable.json").read_text())[release]["fields"]


def lua_literal(value: object) -> str:
    """A Python value as Lua 5.1 source: str (bytes as decimal escapes), numbers, bools, dicts, lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return repr(float(value)) if abs(value) >= 2**53 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "(0/0)"
        if math.isinf(value):
            return "math.huge" if value > 0 else "-math.huge"
        return repr(value)
    if isinstance(value, (str, bytes)):
        data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        return '"' + "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:03d}" for b in data) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"[{lua_literal(k)}]={lua_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "{" + ",".join(lua_literal(v) for v in value) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def _bytes_back(value: object) -> object:
    """jsonenc.lua writes each byte above 127 as one code point: the strings as Lua had them."""
    if isinstance(value, str):
        return value.encode("latin-1").decode("utf-8", "surrogateescape")
    if isinstance(value, dict):
        return {k: _bytes_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bytes_back(v) for v in value]
    return value


@dataclass
class ShimResult:
    ok: bool  # slurm_job_submit returned (no Lua error escaped it)
    rc: object
    job_desc: dict  # the fields after the shim, as slurmctld would keep them
    logs: list[str] = field(default_factory=list)

    @property
    def applied(self) -> str:
        for line in self.logs:
            if "applied=" in line:
                return line.split("applied=", 1)[1].split(" elapsed_ms=", 1)[0]
        return ""


class ShimRig:
    """One helper and one shim folder; `run` sends job_desc tables through the shim."""

    def __init__(self, folder: Path, config: PackerConfig, store: Store | None = None,
                 view: ClusterView = ClusterView(0), timeout_ms: object = 1000,
                 handler: Callable[[dict[str, bytes]], dict[str, str]] | None = None,
                 requeue_by_default: bool = True):
        """`handler`: answer the shim with it instead of the real service (a helper that misbehaves)."""
        if LUA is None:
            raise RuntimeError("lua5.1 is not installed (Debian: apt-get install lua5.1 lua-socket)")
        self.folder = folder
        self.shim = folder / "job_submit.lua"
        self.shim.write_text(resources.files("slurm_plugin").joinpath("job_submit.lua").read_text())
        self.socket = folder / "helper.sock"
        self.kill_switch = folder / "disable"
        self.write_conf(timeout_ms=timeout_ms)
        self.store = store or Store()
        self.service = SubmitService(lambda: config, self.store, FixedView(view),
                                     requeue_by_default=requeue_by_default)

        def submit(fields: dict[str, bytes]) -> Reply:
            answer, after = self.service.respond(fields)
            return Reply(answer.to_wire(), after=after)

        self.server = HelperServer(self.socket, {"submit": handler or submit}, set())
        self.server.serve_in_thread()

    def write_conf(self, **settings: object) -> None:
        values = {"socket": self.socket, "kill_switch": self.kill_switch, **settings}
        (self.folder / "gpupack_shim.conf").write_text("".join(f"{k}={v}\n" for k, v in values.items()))

    def run(self, job_descs: list[dict], release: str = "22.05", uid: int = 0, timeout: float = 30) -> list[ShimResult]:
        cases = [{"uid": uid, "job_desc": jd} for jd in job_descs]
        spec = {"shim": str(self.shim), "settable": settable(release), "cases": cases}
        path = self.folder / "cases.lua"
        path.write_text("return " + lua_literal(spec) + "\n")
        done = subprocess.run([LUA, str(DATA / "driver.lua"), str(path)], capture_output=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"lua5.1 failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
        lines = done.stdout.decode("utf-8").splitlines()
        if len(lines) != len(cases):
            raise AssertionError(f"{len(cases)} cases, {len(lines)} answers: {done.stderr.decode(errors='replace')}")
        return [ShimResult(**_bytes_back(json.loads(line))) for line in lines]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
