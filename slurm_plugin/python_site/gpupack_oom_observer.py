"""gpupack's opt-in out-of-memory observer for Python jobs (standard library only).

Where a site turns it on (gpupack.toml ``[agent] python_oom_observer = true``), the node agent
answers each packed step with a ``PYTHONPATH`` entry holding this folder, which the SPANK plugin
puts in front of the job's own (``spank/gpupack_spank.c``); Python then runs this folder's
``sitecustomize``, which calls :func:`install` and then runs the ``sitecustomize`` the job would
have run without it (the next one on ``sys.path``).

:func:`install` does nothing outside a gpupack step (no ``GPUPACK_AGENT_SOCKET``,
``GPUPACK_REPORT_TOKEN`` or ``SLURM_JOB_ID``) and imports nothing heavy. When the job imports
``torch``, it queues, with ``torch.cuda._lazy_call``, the registration of an observer on
PyTorch's CUDA caching allocator: ``torch._C._cuda_attach_out_of_memory_observer(observer)``,
the hook ``torch.cuda.memory._record_memory_history``'s documentation shows for snapshots at an
out-of-memory. Its C++ side (pytorch/pytorch ``torch/csrc/cuda/Module.cpp``,
``THCPModule_attachOutOfMemoryObserver``, METH_O) takes one callable, initialises CUDA
(``at::globalContext().lazyInitDevice(CUDA)``, ``lazyInitCUDA()`` in older releases) and calls it
as ``observer(device, alloc, device_allocated, device_free)`` (``"LLLL"``) whenever the allocator
is about to raise ``OutOfMemoryError`` (``c10/cuda/CUDACachingAllocator.cpp``: ``obs(device,
alloc_size, set_fraction ? allowed_memory_maximum : device_total, device_free)``). Registering it
at import would initialise CUDA in every process that imports torch; queued with ``_lazy_call`` it
runs when the job first uses CUDA (``torch.cuda._lazy_init`` runs the queued calls).

The observer tells the node agent the failed allocation's size (``alloc_failed`` on the agent's
socket, with the step's report token): the job's word, weighed as the output's text is (a retry at
its own place in the queue, capped). What it held is read from the GPU by the agent, never sent.

It never breaks a job: every failure here (an agent that does not answer, a torch without these
internals, a refused report) is swallowed, and said once on stderr; the queued registration
never raises (a queued call that raised would fail CUDA's initialisation).
"""
from __future__ import annotations

import json
import os
import socket
import sys

ENV_SOCKET, ENV_TOKEN, ENV_JOB = "GPUPACK_AGENT_SOCKET", "GPUPACK_REPORT_TOKEN", "SLURM_JOB_ID"
TIMEOUT_S = 1.0  # per report: the allocator waits for the observer before it raises
MAX_REPORTS = 16  # per process (an allocator may fail, retry smaller and fail again)
PREFIX = "gpupack oom observer"

_said = []  # one complaint per process: stderr is the job's, not ours


def complain(what: str, stream=None) -> None:
    """Say ``what`` went wrong, the first time only; never raises."""
    if _said:
        return
    _said.append(what)
    try:
        (stream or sys.stderr).write(f"{PREFIX}: {what}; the job runs on without it\n")
    except Exception:  # noqa: BLE001 - a closed stderr is no reason to fail
        pass


class Reporter:
    """Tells the node agent of failed allocations (one JSON line per report, its answer read)."""

    def __init__(self, socket_path: str, token: str, job_id: int, timeout_s: float = TIMEOUT_S,
                 max_reports: int = MAX_REPORTS):
        self.socket_path = socket_path
        self.token = token
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.max_reports = max_reports
        self.sent = 0

    @classmethod
    def from_env(cls, env) -> Reporter | None:
        """The step's reporter, or None outside a gpupack step."""
        path, token, job = env.get(ENV_SOCKET), env.get(ENV_TOKEN), env.get(ENV_JOB, "")
        if not path or not token or not job.isdigit():
            return None
        return cls(path, token, int(job))

    def tell(self, asked_bytes: int) -> None:
        """Report one failed allocation of ``asked_bytes``; raises OSError/ValueError on failure."""
        if self.sent >= self.max_reports or asked_bytes <= 0:
            return
        self.sent += 1
        body = {"op": "alloc_failed", "job_id": self.job_id, "token": self.token, "asked_bytes": int(asked_bytes)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout_s)
            sock.connect(self.socket_path)
            sock.sendall((json.dumps(body) + "\n").encode())
            data = b""
            while not data.endswith(b"\n") and len(data) < 65536:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        answer = json.loads(data.decode() or "{}")
        if answer.get("status") != "ok":
            raise ValueError(f"the node agent refused the report: {answer.get('reason', answer)!r}"[:300])


def observer_for(reporter: Reporter):
    """PyTorch's out-of-memory observer: ``(device, alloc, device_allocated, device_free)``."""

    def observer(device, alloc, *_rest) -> None:
        try:
            reporter.tell(int(alloc))
        except Exception as exc:  # noqa: BLE001 - never into the allocator
            complain(f"cannot tell the node agent of a failed allocation ({exc})")

    return observer


def attach(torch, reporter: Reporter) -> bool:
    """Queue the observer's registration for CUDA's initialisation; False when this torch has no
    CUDA allocator hook (a CPU build: nothing to observe) or no lazy queue (never registered then:
    registering now would initialise CUDA)."""
    hook = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    lazy = getattr(getattr(torch, "cuda", None), "_lazy_call", None)
    if hook is None:
        return False
    if lazy is None:
        complain("this torch has no torch.cuda._lazy_call to register the observer at CUDA's start")
        return False
    observer = observer_for(reporter)

    def register() -> None:
        try:
            hook(observer)
        except Exception as exc:  # noqa: BLE001 - a queued call that raised would fail CUDA's start
            complain(f"cannot register PyTorch's out-of-memory observer ({exc})")

    lazy(register)
    return True


class _ThenLoader:
    """The real loader of a module, then ``then(module)`` once it has run (its own loader put back)."""

    def __init__(self, loader, then):
        self._loader = loader
        self._then = then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            try:
                module.__loader__ = self._loader
                if getattr(module, "__spec__", None) is not None:
                    module.__spec__.loader = self._loader
            except Exception:  # noqa: BLE001
                pass
        try:
            self._then(module)
        except Exception as exc:  # noqa: BLE001
            complain(f"cannot watch {module.__name__} ({exc})")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class AfterImport:
    """A ``sys.meta_path`` finder that runs ``then(module)`` after ``name`` is first imported, and
    then leaves ``sys.meta_path``. It finds nothing itself: the other finders do, as without it."""

    def __init__(self, name: str, then, meta_path=None):
        self.name = name
        self.then = then
        self.meta_path = sys.meta_path if meta_path is None else meta_path
        self._busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in [f for f in self.meta_path if f is not self]:
                find = getattr(finder, "find_spec", None)
                if find is not None:
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None  # the import goes on as it would have
            spec.loader = _ThenLoader(spec.loader, self.then)
            self.leave()
            return spec
        except Exception as exc:  # noqa: BLE001 - the import goes on as it would have
            complain(f"cannot watch the import of {fullname} ({exc})")
            self.leave()
            return None
        finally:
            self._busy = False

    def leave(self) -> None:
        try:
            self.meta_path.remove(self)
        except ValueError:
            pass


def install(env=None, meta_path=None, modules=None) -> bool:
    """Watch for torch in this process when it runs in a gpupack step; True when watching."""
    try:
        reporter = Reporter.from_env(os.environ if env is None else env)
        if reporter is None:
            return False
        modules = sys.modules if modules is None else modules
        if "torch" in modules:
            return attach(modules["torch"], reporter)
        meta_path = sys.meta_path if meta_path is None else meta_path
        meta_path.insert(0, AfterImport("torch", lambda torch: attach(torch, reporter), meta_path))
        return True
    except Exception as exc:  # noqa: BLE001
        complain(f"cannot start ({exc})")
        return False
