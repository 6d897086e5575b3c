"""How a simulated job's framework turns what it allocates into memory held on the GPU.

What NVML shows of a process is what its framework's allocator holds, not what its tensors use:

- ``plain``: holds what it allocates (a CUDA program with ``cudaMalloc`` per buffer).
- ``prealloc`` (JAX, TensorFlow): at start it takes a pool of the device it sees and serves
  every allocation from it; past the pool the job is out of memory. JAX's pool is
  ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of the device (0.75 unset) unless
  ``XLA_PYTHON_CLIENT_PREALLOCATE=false``; TensorFlow's is the whole device unless
  ``TF_FORCE_GPU_ALLOW_GROWTH=true``. Told not to, it allocates as it goes (``plain``).
- ``cache`` (PyTorch's caching allocator): keeps ``cache_bytes`` of freed blocks reserved
  beyond what it allocated; when the device is full it gives its cache back before it fails
  (as ``torch.cuda`` empties its cache and retries before raising OutOfMemoryError).
"""
from __future__ import annotations

from dataclasses import dataclass

ALLOCATORS = ("plain", "prealloc", "cache")
JAX_DEFAULT_FRACTION = 0.75


class AllocatorError(ValueError):
    """An allocator the framework does not have (prealloc is JAX's and TensorFlow's)."""


@dataclass(frozen=True)
class Allocator:
    kind: str  # plain | prealloc | cache
    pool_fraction: float = 0.0  # prealloc: the share of the device it takes at start (0: none)
    cache_bytes: int = 0  # cache: freed blocks it keeps reserved

    def pool_bytes(self, capacity: int) -> int:
        return int(capacity * self.pool_fraction) if self.kind == "prealloc" else 0

    def wanted(self, allocated: int) -> tuple[int, int]:
        """(bytes it would hold for `allocated`, the least it must hold) outside a pool."""
        return allocated + (self.cache_bytes if self.kind == "cache" else 0), allocated


def allocator_for(kind: str, framework: str, env: dict[str, str], cache_bytes: int = 0) -> Allocator:
    """The allocator `framework` uses in a process with environment `env`."""
    if kind not in ALLOCATORS:
        raise AllocatorError(f"allocator must be one of {ALLOCATORS}, got {kind!r}")
    if kind == "cache":
        return Allocator("cache", cache_bytes=int(cache_bytes))
    if kind == "plain":
        return Allocator("plain")
    if framework == "jax":
        if env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").strip().lower() == "false":
            return Allocator("plain")
        fraction = env.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
        try:
            value = float(fraction) if fraction else JAX_DEFAULT_FRACTION
        except ValueError:
            value = JAX_DEFAULT_FRACTION  # as XLA: an unreadable value is its default
        return Allocator("prealloc", pool_fraction=min(max(value, 0.0), 1.0))
    if framework == "tensorflow":
        if env.get("TF_FORCE_GPU_ALLOW_GROWTH", "").strip().lower() == "true":
            return Allocator("plain")
        return Allocator("prealloc", pool_fraction=1.0)
    raise AllocatorError(f"only JAX and TensorFlow preallocate (--framework jax|tensorflow), not {framework}")
