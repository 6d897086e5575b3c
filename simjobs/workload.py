"""The simulated GPU workload: allocates on the simulated GPU the job was given, grows, reports.

How fast it runs is the simulation's physics: it registers as a process on its device and
reads which workloads compute on the same GPU (``SimGpuBackend.neighbours``), slows down by
the measured pair speeds, and tells the GPU how busy it keeps the engines (its utilisation
alone times that speed), which is all the GPU's counters ever sample. Reporting progress
to the node agent is optional (``--no-report``: a job that says nothing, like most real
training jobs).

Out of memory: when an allocation fails (past its MIG slice or its MPS limit) it prints what a
real framework's process prints to stderr (``--framework pytorch|jax|tensorflow|cuda``, the
texts of `packer.oom_texts`) and exits 1, as a Python process does on an uncaught exception
(and a CUDA sample on its failed check). It tells the node agent nothing of it unless
``--oom-report`` stands for a site's opt-in out-of-memory observer (``alloc_failed``: what it
asked for and held).

Checkpoints (``--checkpoint-every N``): every N iterations, and at once on SIGUSR1 (the
regroup watch's checkpoint signal, ``--signal=B:USR1@T``) after finishing the iteration it
is in, the workload prints ``simgpu: checkpoint at <unix time> ...`` and reports the
checkpoint to the agent (``checkpoint: true``, and its period ``checkpoint_every_s`` once
it has one), so a move waits only as long as the checkpoint takes.

Where it runs comes from the step environment the node agent answered through the SPANK
plugin (``GPUPACK_SIM_DIR``, ``GPUPACK_NODE``, ``GPUPACK_SIM_DEVICE``,
``GPUPACK_MEM_LIMIT_BYTES`` for an MPS share, ``GPUPACK_AGENT_SOCKET``,
``GPUPACK_REPORT_TOKEN``); without ``GPUPACK_SIM_DEVICE`` it falls back to a ``MIG-…``
in ``CUDA_VISIBLE_DEVICES`` or to the GPU index there. Like a CUDA process, it is known to
the GPU by its own pid: its process and memory are registered on the simulated GPU under
it (an MPS client when ``CUDA_MPS_PIPE_DIRECTORY`` names a running MPS control daemon, under
the limits the daemon sets: :mod:`gpus.sim.mps_control`; refused, as CUDA refuses it, when
the device's compute mode allows no such context: :mod:`gpus.sim.compute_mode`, or when it
cannot open a MIG device's capability nodes: :mod:`gpus.sim.caps`), and the
node agent, reading
them through NVML, maps the pid to the job as it does on real GPUs.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from packer.oom_texts import FRAMEWORKS, PYTORCH, render
from simjobs import pairs

log = logging.getLogger(__name__)

MIB = 1024 * 1024
GIB = 1024 * MIB
MIN_REPORT_GAP_S = 0.15  # above slurm_plugin.agent.trust.MIN_REPORT_INTERVAL_S
SPEED_REFRESH_S = 0.25  # how often the workload looks again at who shares its GPU


class WorkloadSetupError(RuntimeError):
    """The workload cannot find the simulated GPU it was given; the message says what is missing."""


@dataclass(frozen=True)
class Target:
    sim_dir: Path
    node: str
    device_uuid: str | None
    gpu_index: int | None
    owner: str  # the process's pid: what NVML names a process by
    job_id: int | None
    mem_limit_bytes: int | None
    agent_socket: str | None
    token: str | None
    mps: bool = False  # an MPS client (the agent gave the step an MPS pipe directory)


def target_from_env(env: dict[str, str]) -> Target:
    sim_dir = env.get("GPUPACK_SIM_DIR") or _sim_dir_from_config(env.get("GPUPACK_CONFIG"))
    node = env.get("GPUPACK_NODE") or env.get("SLURMD_NODENAME")
    if not sim_dir or not node:
        raise WorkloadSetupError(
            "no simulated GPU in this environment (GPUPACK_SIM_DIR/GPUPACK_NODE unset): run it in a "
            "Slurm job on the dev cluster (the SPANK plugin sets them), or set them by hand")
    device = env.get("GPUPACK_SIM_DEVICE")
    cvd = (env.get("CUDA_VISIBLE_DEVICES") or "").split(",")[0].strip()
    gpu_index: int | None = None
    if not device and cvd.startswith("MIG-"):
        device = cvd
    idx = env.get("GPUPACK_GPU_INDEX", cvd)
    if idx and idx.lstrip("-").isdigit():
        gpu_index = int(idx)
    job = env.get("SLURM_JOB_ID", "")
    limit = env.get("GPUPACK_MEM_LIMIT_BYTES", "")
    return Target(Path(sim_dir), node, device, gpu_index, str(os.getpid()),
                  int(job) if job.isdigit() else None, int(limit) if limit.isdigit() else None,
                  env.get("GPUPACK_AGENT_SOCKET"), env.get("GPUPACK_REPORT_TOKEN"),
                  mps=bool(env.get("CUDA_MPS_PIPE_DIRECTORY")))


def _sim_dir_from_config(config: str | None) -> str | None:
    """``[paths] simgpu_dir`` of gpupack.toml (when the agent did not answer the step)."""
    if not config:
        return None
    import tomllib

    try:
        with open(config, "rb") as fh:
            value = tomllib.load(fh).get("paths", {}).get("simgpu_dir")
    except (OSError, ValueError):
        return None
    return str(value) if value else None


def parse_size(text: str) -> int:
    """``2GiB``, ``40MiB``, ``512M``, ``1.5G``, ``1048576`` -> bytes."""
    t = text.strip().replace(" ", "")
    units = {"gib": GIB, "gb": GIB, "g": GIB, "mib": MIB, "mb": MIB, "m": MIB, "kib": 1024, "kb": 1024,
             "k": 1024, "b": 1, "": 1}
    num = t.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = t[len(num):].lower()
    if unit not in units or not num:
        raise ValueError(f"cannot read size {text!r}; write it like 2GiB, 40MiB or 1048576")
    value = float(num) * units[unit]
    if value < 0:
        raise ValueError(f"size {text!r} is negative")
    return int(value)


def oom_message(asked: int, capacity: int, used: int, gpu: int | None, framework: str = PYTORCH) -> str:
    """What ``framework``'s process prints when an allocation of ``asked`` fails with ``used``
    held of ``capacity`` (`packer.oom_texts.render`)."""
    return render(framework, asked, used, capacity, gpu if gpu is not None else 0)


def _no_agent_client(path: str, body: dict, timeout: float) -> dict:
    raise OSError("no agent client given (run(ask=...): slurm_plugin.agent.client.ask)")


class _Reporter:
    """Sends progress to the agent now and then."""

    def __init__(self, target: Target, workload: str | None, every_s: float,
                 ask: Callable[[str, dict, float], dict] | None = None):
        self.target = target
        self.workload = workload
        self.every_s = every_s
        self.last = 0.0
        self.window: tuple[float, int] = (time.monotonic(), 0)
        self.failures = 0
        self.checkpoint_every_s: float | None = None  # sent with every report once known
        self.alloc_peak: Callable[[], int] | None = None  # the allocator's peak, sent as TorchProbe.report sends it
        self._ask = ask or _no_agent_client

    def final(self, iterations: int, patience_s: float = 3.0) -> None:
        """The last report; retried for a while, so an agent that is restarting still gets it."""
        deadline = time.monotonic() + patience_s
        while True:
            before = self.failures
            self.maybe(iterations, force=True)
            if self.failures == before or time.monotonic() >= deadline:
                return
            time.sleep(0.3)

    def alloc_failed(self, asked: int, held: int) -> None:
        """Tell the agent an allocation failed (what was asked, what was held), once, before
        the process exits: its step's end is then known as an out-of-memory end."""
        if not self.target.agent_socket or not self.target.token or self.target.job_id is None:
            return
        body = {"op": "alloc_failed", "job_id": self.target.job_id, "token": self.target.token,
                "asked_bytes": int(asked), "held_bytes": int(held)}
        try:
            self._ask(self.target.agent_socket, body, 1.0)
        except OSError as exc:
            print(f"simgpu: cannot tell the node agent of the failed allocation ({exc})", file=sys.stderr)

    def maybe(self, iterations: int, force: bool = False, checkpoint: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every_s:
            return
        if force and now - self.last < MIN_REPORT_GAP_S:  # the agent drops reports closer than this
            time.sleep(MIN_REPORT_GAP_S - (now - self.last))
            now = time.monotonic()
        t0, i0 = self.window
        tput = (iterations - i0) / (now - t0) if now > t0 else 0.0
        self.window = (now, iterations)
        self.last = now
        if not self.target.agent_socket or not self.target.token or self.target.job_id is None:
            return
        body = {"op": "report", "job_id": self.target.job_id, "token": self.target.token,
                "iterations": iterations, "throughput": round(min(tput, 10_000.0), 3),
                "util_pct": pairs.workload_util(self.workload)}
        if self.workload:
            body["workload"] = self.workload
        if checkpoint:
            body["checkpoint"] = True
        if self.alloc_peak is not None:
            body["alloc_peak_bytes"] = int(self.alloc_peak())
        if self.checkpoint_every_s is not None:
            body["checkpoint_every_s"] = round(min(max(self.checkpoint_every_s, 0.1), 7 * 86400.0), 3)
        try:
            answer = self._ask(self.target.agent_socket, body, 1.0)
        except OSError as exc:
            self.failures += 1
            if self.failures == 1:
                print(f"simgpu: cannot report to the node agent ({exc}); running on", file=sys.stderr)
            return
        if answer.get("status") != "ok":
            self.failures += 1
            if self.failures <= 3:
                print(f"simgpu: the agent did not take a report: {answer.get('reason')}", file=sys.stderr)


def run(*, mem_start: int, mem_growth: int, iters: int, iter_ms: float, workload: str | None,
        grow_iters: int | None = None, grow_after: int = 0, env: dict[str, str] | None = None, report_every_s: float = 0.5, report: bool = True,
        checkpoint_every: int = 0, out: TextIO = sys.stdout, err: TextIO = sys.stderr, backend=None,
        ask: Callable[[str, dict, float], dict] | None = None, framework: str = PYTORCH,
        oom_report: bool = False, allocator: str = "plain", cache_bytes: int = 0, probe: bool = False) -> int:
    """Run the workload; returns the process exit status (0 done, 1 out of memory, 2 setup).
    ``ask`` sends one request to the node agent (`slurm_plugin.agent.client.ask`, passed in by
    the command, so the simulated jobs do not import the agent); without it no report goes out.
    ``framework``: whose out-of-memory text it prints; ``oom_report``: it also tells the agent of
    a failed allocation (an opt-in observer; off, like a real job). ``allocator``: how its
    framework holds memory (`simjobs.allocators`: plain, prealloc, cache with ``cache_bytes``);
    ``probe``: its reports carry the allocator's peak of allocated bytes, as a job running
    `TorchProbe.report` sends it (only with ``report``)."""
    from mig.errors import MigError

    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")

    env = dict(os.environ if env is None else env)
    from gpus.sim.caps import CapError
    from simjobs.allocators import allocator_for

    policy = allocator_for(allocator, framework, env, cache_bytes)

    try:
        target, gpu, device = _find_device(env, backend, err)
        gpu_index, gi_id = gpu.find_device(device)
        _open_capabilities(gpu, gpu_index, gi_id, device)
    except (WorkloadSetupError, MigError, CapError) as exc:
        print(f"simgpu: {exc}", file=err)
        return 2
    capacity = _capacity(gpu, gpu_index, gi_id)
    if target.mem_limit_bytes:
        capacity = min(capacity, target.mem_limit_bytes)
    default_speed = float(env.get("GPUPACK_SIM_DEFAULT_PAIR_SPEED", pairs.DEFAULT_PAIR_SPEED))
    reporter = _Reporter(target, workload, report_every_s, ask) if report else None
    observer = (reporter or _Reporter(target, workload, report_every_s, ask)) if oom_report else None
    engines = _Engines(gpu, device, target.owner, workload, default_speed, target.mps, env)
    memory = _Memory(gpu, device, target.owner, capacity, gpu_index, err, observer, framework, policy)
    if reporter is not None and probe:
        reporter.alloc_peak = lambda: memory.allocated_peak
    stopping = _StopSignal()
    checkpoints = _Checkpoints(checkpoint_every, iter_ms, reporter, out)
    old = signal.signal(signal.SIGTERM, stopping)
    old_usr1 = signal.signal(signal.SIGUSR1, checkpoints.ask)
    print(f"simgpu: job {target.job_id} on {target.node} GPU {gpu_index} device {device} "
          f"({capacity / GIB:.2f} GiB), workload {workload or 'generic'}"
          f"{'' if report else ', not reporting'}"
          f"{f', checkpoint every {checkpoint_every} iterations' if checkpoint_every else ''}"
          f", allocator {policy.kind}"
          f"{f' (pool {policy.pool_fraction:.2f} of the device)' if policy.pool_fraction else ''}",
          file=out, flush=True)
    try:
        return _iterate(memory, engines, reporter, stopping, checkpoints, mem_start=mem_start,
                        mem_growth=mem_growth, grow_iters=iters if grow_iters is None else grow_iters,
                        grow_after=grow_after, iters=iters, iter_ms=iter_ms, out=out, err=err)
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGUSR1, old_usr1)
        try:
            engines.stop()
            gpu.free_memory(device, target.owner)
        except MigError:
            pass


def _find_device(env: dict[str, str], backend, err: TextIO) -> tuple[Target, Any, str]:
    """(where to run, the simulated GPUs of its node, the device UUID to allocate on): the
    device the agent named, else the GPU index's (its first MIG device in MIG mode, as CUDA
    would). Raises WorkloadSetupError (or MigError) when there is none."""
    from gpus.sim.backend import SimGpuBackend

    target = target_from_env(env)
    gpu = backend or SimGpuBackend(target.sim_dir, target.node)
    device = target.device_uuid
    if device is None:
        gpus = {g.index: g for g in gpu.list_gpus()}
        if target.gpu_index not in gpus:
            raise WorkloadSetupError(f"no device: GPUPACK_SIM_DEVICE unset and GPU index "
                                     f"{target.gpu_index} is not one of {sorted(gpus)} on {target.node}")
        device = gpus[target.gpu_index].uuid
        if gpus[target.gpu_index].mig_enabled:
            # no answer from the agent: like CUDA, use the first MIG device of the GPU
            insts = gpu.list_instances(target.gpu_index)
            if not insts:
                raise WorkloadSetupError(f"CUDA error: no CUDA-capable device is detected (GPU "
                                         f"{target.gpu_index} of {target.node} is in MIG mode and has no MIG device)")
            device = insts[0].uuid
            print(f"simgpu: no isolation from the node agent; using the first MIG device {device}", file=err)
    return target, gpu, device


def _open_capabilities(gpu, gpu_index: int, gi_id: int | None, device: str) -> None:
    """As CUDA does before it uses a MIG device: open its capability nodes (a process fenced
    to another slice cannot, :func:`gpus.sim.caps.open_mig_device`). An in-memory simulated
    GPU (unit tests) has no driver files."""
    from gpus.nvml.caps import DriverFiles
    from gpus.sim.caps import open_mig_device

    if gi_id is None or getattr(gpu, "state_path", None) is None:
        return
    ci_id = next((i.ci_id for i in gpu.list_instances(gpu_index) if i.gi_id == gi_id), None)
    open_mig_device(DriverFiles.for_node(gpu.state_path.parent, gpu.node), gpu.device_minor(gpu_index), gi_id,
                    ci_id, device)


def _iterate(memory: _Memory, engines: _Engines, reporter: _Reporter | None, stopping: _StopSignal,
             checkpoints: _Checkpoints, *, mem_start: int, mem_growth: int, grow_iters: int, iters: int,
             iter_ms: float, out: TextIO, err: TextIO, grow_after: int = 0) -> int:
    """Make the process (its CUDA context), allocate, then run the iterations (growing and
    reporting); the exit status."""
    from gpus.sim.mps_state import MpsRefused
    from mig.errors import DevicesUnavailableError

    try:
        engines.start()
    except MpsRefused as exc:
        print(f"simgpu: the MPS control daemon refused this client: {exc}", file=err)
        return 2
    except DevicesUnavailableError as exc:  # the device's compute mode: as cudaErrorDevicesUnavailable
        print(f"simgpu: {exc}", file=err, flush=True)
        return 2
    if not memory.preallocate() or not memory.alloc(mem_start):
        return 1
    done = 0
    started = time.monotonic()
    for done in range(1, iters + 1):
        if stopping.signum:
            print(f"simgpu: stopped by signal {stopping.signum} after {done - 1} iterations", file=err)
            return 128 + stopping.signum
        time.sleep(iter_ms / 1000.0 / max(engines.speed(), 0.01))
        if mem_growth and grow_after < done <= grow_iters and not memory.alloc(mem_growth):
            return 1
        if checkpoints.after(done, time.monotonic() - started):
            continue  # its report went with the checkpoint
        if reporter is not None:
            reporter.maybe(done)
    if reporter is not None:
        reporter.final(done)
    elapsed = time.monotonic() - started
    print(f"simgpu: done {done} iterations in {elapsed:.2f}s ({done / elapsed if elapsed else 0:.1f} it/s), "
          f"peak {memory.held / GIB:.2f} GiB held, {memory.allocated_peak / GIB:.2f} GiB allocated", file=out,
          flush=True)
    return 0


class _StopSignal:
    """A SIGTERM handler that only notes the signal: the loop stops at the next iteration."""

    def __init__(self) -> None:
        self.signum = 0

    def __call__(self, signum: int, _frame) -> None:
        self.signum = signum


class _Checkpoints:
    """When the workload checkpoints: every `every` iterations (0: only when signalled), and
    after the iteration it is in when SIGUSR1 arrives. Each checkpoint is a line on `out`
    and a report to the agent (when reporting)."""

    def __init__(self, every: int, iter_ms: float, reporter: _Reporter | None, out: TextIO):
        self.every = every
        self.reporter = reporter
        self.out = out
        self.asked = False
        self.taken = 0
        if every and reporter is not None:
            reporter.checkpoint_every_s = every * iter_ms / 1000.0  # alone; measured from the first one

    def ask(self, _signum: int, _frame) -> None:
        """The SIGUSR1 handler: only notes it (the loop checkpoints after this iteration)."""
        self.asked = True

    def after(self, done: int, elapsed_s: float) -> bool:
        """Checkpoint after iteration `done` when due or asked; whether it did."""
        periodic = bool(self.every) and done % self.every == 0
        if not (periodic or self.asked):
            return False
        why = "on signal USR1" if self.asked else f"every {self.every} iterations"
        self.asked = False
        self.taken += 1
        print(f"simgpu: checkpoint at {time.time():.3f} after {done} iterations ({why})", file=self.out, flush=True)
        if self.reporter is not None:
            if self.every and done:
                self.reporter.checkpoint_every_s = self.every * elapsed_s / done  # its measured period
            self.reporter.maybe(done, force=True, checkpoint=True)
        return True


class _Memory:
    """What the workload holds on its device (``held``: what NVML shows), within its capacity (a
    partition or an MPS limit), and what its tensors use (``allocated``), as its framework's
    allocator (`simjobs.allocators`) keeps them apart; an allocation past the device, or past a
    preallocated pool, fails like the framework's, with its message."""

    def __init__(self, gpu, device: str, owner: str, capacity: int, gpu_index: int, err: TextIO,
                 reporter: _Reporter | None = None, framework: str = PYTORCH, policy=None):
        from simjobs.allocators import Allocator

        self.gpu, self.device, self.owner = gpu, device, owner
        self.capacity, self.gpu_index, self.err = capacity, gpu_index, err
        self.reporter = reporter  # told of a failed allocation (an opt-in OOM observer; None: a real job)
        self.framework = framework  # whose out-of-memory text it prints
        self.policy = policy or Allocator("plain")
        self.held = 0
        self.allocated = 0
        self.allocated_peak = 0
        self.pool = 0

    def preallocate(self) -> bool:
        """Take the framework's pool at start (none unless it preallocates)."""
        pool = self.policy.pool_bytes(self.capacity)
        if pool and not self._hold(pool, pool):
            return False
        self.pool = pool
        return True

    def alloc(self, n: int) -> bool:
        new = self.allocated + n
        if self.pool:
            if new > self.pool:  # the pool is all the framework uses
                return self._failed(n)
        else:
            want, least = self.policy.wanted(new)
            if want > self.held and not self._grow(want - self.held) and not (
                    least <= self.held or self._hold(least - self.held, n)):
                return False
        self.allocated = new
        self.allocated_peak = max(self.allocated_peak, new)
        return True

    def _grow(self, n: int) -> bool:
        """Hold `n` more bytes if they fit (no message: the allocator may do with less)."""
        from mig.errors import GpuOutOfMemoryError

        try:
            if self.held + n > self.capacity:
                raise GpuOutOfMemoryError("over the MPS memory limit")
            self.gpu.alloc_memory(self.device, self.owner, n)
        except GpuOutOfMemoryError:
            return False
        self.held += n
        return True

    def _hold(self, n: int, asked: int) -> bool:
        return self._grow(n) or self._failed(asked)

    def _failed(self, n: int) -> bool:
        print(oom_message(n, self.capacity, self.held, self.gpu_index, self.framework), file=self.err,
              end="", flush=True)
        if self.reporter is not None:
            self.reporter.alloc_failed(n, self.held)
        return False


class _Engines:
    """The workload's process on the simulated GPU: how fast it runs beside its neighbours,
    and how busy it keeps the engines (what the GPU's counters sample)."""

    def __init__(self, gpu, device: str, owner: str, workload: str | None, default_speed: float,
                 mps: bool = False, env: dict[str, str] | None = None):
        self.gpu, self.device, self.owner, self.mps = gpu, device, owner, mps
        self.env = env or {}
        self.workload = workload
        self.default_speed = default_speed
        self.alone_util = pairs.workload_util(workload)
        self.current = 1.0
        self.checked = 0.0

    def start(self) -> None:
        """Make the process's CUDA context; with an MPS pipe directory, join the MPS control
        daemon there as the CUDA driver does (none running: a plain process), under the limits
        it answers, which the simulated GPU enforces."""
        limit = None
        if self.mps:
            from gpus.sim.mps_control import connect_client

            limits = connect_client(self.env, os.getuid(), os.getpid())
            self.mps = limits is not None
            limit = limits.pinned_bytes if limits else None
        from mig.errors import MigError

        try:
            self.gpu.start_process(self.device, self.owner, self.workload, self.alone_util, mps=self.mps,
                                   mps_limit_bytes=limit)
        except MigError:
            if self.mps:  # no context after all: the daemon forgets this client
                from gpus.sim.mps_control import client_exit

                client_exit(self.env, os.getpid())
            raise
        self.checked = 0.0

    def speed(self) -> float:
        now = time.monotonic()
        if now - self.checked >= SPEED_REFRESH_S:
            self.checked = now
            speed = pairs.packed_speed(self.workload, self.gpu.neighbours(self.device, self.owner),
                                       default=self.default_speed)
            if speed != self.current:
                self.current = speed
                self.gpu.set_busy(self.device, self.owner, self.alone_util * speed)
        return self.current

    def stop(self) -> None:
        self.gpu.end_process(self.device, self.owner)
        if self.mps:
            from gpus.sim.mps_control import client_exit

            client_exit(self.env, os.getpid())


def _capacity(gpu, gpu_index: int, gi_id: int | None) -> int:
    if gi_id is None:
        return next(g.memory_mib for g in gpu.list_gpus() if g.index == gpu_index) * MIB
    return next(i.memory_mib for i in gpu.list_instances(gpu_index) if i.gi_id == gi_id) * MIB
