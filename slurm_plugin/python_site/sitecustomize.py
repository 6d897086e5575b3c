"""gpupack's opt-in out-of-memory observer (`gpupack_oom_observer`), loaded for Python jobs in
packed steps where a site turns it on; then the ``sitecustomize`` the job would have run without
this folder on its ``PYTHONPATH`` (the next one on ``sys.path``: its own, or the distribution's)."""
import os
import sys


def _observe() -> None:
    try:
        import gpupack_oom_observer

        gpupack_oom_observer.install()
    except Exception as exc:  # noqa: BLE001 - never break the interpreter's start
        try:
            sys.stderr.write(f"gpupack oom observer: cannot start ({exc}); the job runs on without it\n")
        except Exception:  # noqa: BLE001
            pass


def _the_next_sitecustomize() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` as Python would have; its errors are its
    own (Python's site module reports them as it would)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_observe()
_the_next_sitecustomize()
