"""The frameworks' own out-of-memory texts, recognised in the tail of a job's output (pure).

A real job tells nobody that an allocation failed: PyTorch, JAX/XLA, TensorFlow and plain
CUDA programs print their error to stderr and exit. This module finds that text in a bounded
tail of the output (the caller reads the tail, `slurm_plugin.agent.output_tail`) and parses
the size it names into bytes where it names one. What it finds is **the job's word**: anyone
can print these lines (`echo "CUDA out of memory..."`), so a match may earn a job a retry at
its own place in the queue, never a lift above jobs that waited longer
(`packer.oom_restart`, evidence "reported").

The texts, each as its project's source writes it (`TEXTS` holds the same table):

- ``torch-native``: ``CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity
  of ...`` (PyTorch >= 2.1; before: ``... Tried to allocate 20.00 MiB (GPU 0; 7.93 GiB total
  capacity; ...)``), raised as ``RuntimeError`` (< 1.13), ``torch.cuda.OutOfMemoryError``
  (1.13-2.4) or ``torch.OutOfMemoryError`` (>= 2.5). Source: pytorch/pytorch
  ``c10/cuda/CUDACachingAllocator.cpp`` (DeviceCachingAllocator::malloc, ``TORCH_CHECK_WITH(
  OutOfMemoryError, ...)``; read at 001074d2); sizes by its ``format_size``: "N bytes" or
  "%.2f KiB|MiB|GiB".
- ``torch-1eb``: ``CUDA out of memory. Tried to allocate more than 1EB memory.`` (no size kept).
  Source: pytorch/pytorch ``c10/cuda/CUDAMallocAsyncAllocator.cpp`` (allocate).
- ``torch-async``: ``Allocation on device 0 would exceed allowed memory. (out of memory)``, then
  ``Requested               : 640.00 MiB`` a line or two below (PYTORCH_CUDA_ALLOC_CONF=
  backend:cudaMallocAsync). Source: pytorch/pytorch ``c10/cuda/CUDAMallocAsyncAllocator.cpp``
  (mallocAsync; read at 03459473).
- ``xla``: ``RESOURCE_EXHAUSTED: Out of memory while trying to allocate 21474836480 bytes.``
  (JAX raises it as ``XlaRuntimeError``/``JaxRuntimeError``). Source: openxla/xla
  ``xla/stream_executor/integrations/tf_allocator_adapter.cc`` (MemoryAllocationError; read at
  370cfa8d); TensorFlow's copy of stream_executor prints the same. ``Out of host memory ...``
  (the same function, host RAM) is not recognised.
- ``xla-readable``: ``Out of memory while trying to allocate 8.00GiB.`` (size in tsl's
  HumanReadableNumBytes form "%.2fGiB"), as real JAX users' logs quote it ("RESOURCE_EXHAUSTED:
  Out of memory while trying to allocate 8.00GiB"); the line that prints this form was not found
  in the openxla/xla snapshot searched, so it is kept as seen, not as read in a source.
- ``tf-tensor``: ``OOM when allocating tensor with shape[32,1024,64,64] and type float on
  /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc``, raised in Python as
  ``ResourceExhaustedError``; size = the shape's elements x the type's size (None for TF 1.x's
  text without a type). Source: tensorflow/tensorflow ``tensorflow/core/framework/op_kernel.cc``
  (OpKernelContext::allocate_tensor, ``errors::ResourceExhausted``; read at c8e5f669).
- ``cuda-driver``: ``failed to allocate 2.00G (2147483648 bytes) from device:
  CUDA_ERROR_OUT_OF_MEMORY: out of memory`` and any line naming ``CUDA_ERROR_OUT_OF_MEMORY``.
  Source: the stream_executor ``cuda_driver.cc`` of tensorflow/tensorflow and openxla/xla
  (DeviceAllocate); the CUDA driver API's CUresult 2.
- ``cuda-runtime``: ``CUDA error: out of memory`` (PyTorch's C10_CUDA_CHECK,
  pytorch/pytorch ``c10/cuda/CUDAException.cpp``), ``cudaErrorMemoryAllocation`` and
  ``code=2(cudaErrorMemoryAllocation)`` (NVIDIA/cuda-samples ``Common/helper_cuda.h``, check():
  "CUDA error at %s:%d code=%d(%s)"); the CUDA runtime's cudaGetErrorString/cudaGetErrorName of
  error 2. No size.
- ``cublas``: ``CUBLAS_STATUS_ALLOC_FAILED`` (cuBLAS status 3, "usually caused by a cudaMalloc()
  failure"; printed by pytorch/pytorch ``aten/src/ATen/cuda/Exceptions.h``,
  TORCH_CUDABLAS_CHECK, and by TensorFlow's "failed to create cublas handle"). No size.
- ``cudnn``: ``CUDNN_STATUS_ALLOC_FAILED`` and cuDNN 9's
  ``CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED`` (printed by pytorch/pytorch
  ``aten/src/ATen/cudnn/Exceptions.h`` and TensorFlow's "Could not create cudnn handle"). No size.

Not out-of-memory ends, on purpose: TensorFlow's/XLA's BFC warning ``Allocator (GPU_0_bfc) ran
out of memory trying to allocate ...`` (logged also when "the caller indicates that this is not
a failure"; the fatal text follows it when it is one), ``Out of host memory``,
``CUDNN_STATUS_NOT_ENOUGH_WORKSPACE`` (the caller passed too small a workspace: no allocation
failed), and host-side allocators (``DefaultCPUAllocator: not enough memory``).

The last matching line of the tail wins (the failure that ended the job comes last). Lines are
cut at `MAX_LINE` characters before matching, and the patterns are linear, so a hostile output
costs a bounded time.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

PYTORCH, JAX, TENSORFLOW, CUDA = "pytorch", "jax", "tensorflow", "cuda"
FRAMEWORKS = (PYTORCH, JAX, TENSORFLOW, CUDA)
MAX_LINE = 8192  # characters of one line that are read (a PyTorch line is ~600)
MAX_TAIL = 1 << 20  # the most text `find_oom` reads (the caller should pass far less)
_KIB = 1024

_UNITS = {"bytes": 1, "b": 1, "kib": _KIB, "mib": _KIB**2, "gib": _KIB**3, "tib": _KIB**4, "pib": _KIB**5,
          "eib": _KIB**6}

# TensorFlow's DataTypeString -> bytes per element (tensorflow/core/framework/types.cc)
TF_DTYPE_BYTES = {
    "float": 4, "double": 8, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2,
    "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1, "complex64": 8, "complex128": 16,
    "qint8": 1, "quint8": 1, "qint16": 2, "quint16": 2, "qint32": 4, "float8_e5m2": 1, "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1, "float8_e4m3b11fnuz": 1, "float8_e5m2fnuz": 1, "int4": 1, "uint4": 1,
}


@dataclass(frozen=True)
class OomText:
    """One framework out-of-memory text found in a job's output."""

    framework: str  # pytorch | jax | tensorflow | cuda
    requested_bytes: int | None  # the allocation that failed, where the text names it
    line: str  # the line it was found on (cut at MAX_LINE)
    text_id: str = ""  # which text of the table (docstring, TEXTS)

    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"framework must be one of {FRAMEWORKS}, got {self.framework!r}")
        if self.requested_bytes is not None and self.requested_bytes <= 0:
            raise ValueError(f"requested_bytes must be positive or None, got {self.requested_bytes}")


def size_bytes(number: str, unit: str) -> int:
    """'20.00', 'MiB' -> bytes (PyTorch's format_size, tsl's HumanReadableNumBytes, 'bytes').
    ValueError on anything else: a size is never guessed."""
    factor = _UNITS.get(unit.strip().lower())
    if factor is None:
        raise ValueError(f"unknown size unit {unit!r}")
    value = float(number)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"bad size {number!r}")
    return int(round(value * factor))


def tf_tensor_bytes(shape: str, dtype: str | None) -> int | None:
    """'[32,1024,64,64]', 'float' -> bytes; None when the type's size or a dimension is unknown."""
    per = TF_DTYPE_BYTES.get(dtype) if dtype else None
    body = shape.strip().strip("[]").strip()
    if per is None or not body:
        return None
    total = per
    for dim in body.split(","):
        dim = dim.strip()
        if not dim.isdigit():
            return None  # "?" or -1: an unknown dimension
        total *= int(dim)
    return total or None


_SIZE = r"(\d+(?:\.\d+)?) ?(bytes|[KMGTPE]iB|B)"
_TORCH_TRIED = re.compile(r"CUDA out of memory\. Tried to allocate " + _SIZE + r"(?=[ .;(]|$)")
_TORCH_1EB = re.compile(r"CUDA out of memory\. Tried to allocate more than 1EB memory")
_TORCH_ASYNC = re.compile(r"Allocation on device \d+ would exceed allowed memory\. \(out of memory\)")
_TORCH_ASYNC_REQUESTED = re.compile(r"^\s*Requested\s*: " + _SIZE)
_XLA_BYTES = re.compile(r"Out of memory while trying to allocate (\d+) bytes")
_XLA_READABLE = re.compile(r"Out of memory while trying to allocate " + r"(\d+(?:\.\d+)?)([KMGTPE]iB|B)\b")
_TF_TENSOR = re.compile(r"OOM when allocating tensor with shape ?(\[[0-9?,\- ]*\])(?: and type (\w+))?")
_DRIVER_ALLOC = re.compile(r"failed to allocate \S+ \((\d+) bytes\) from device: CUDA_ERROR_OUT_OF_MEMORY")
_DRIVER_OOM = re.compile(r"\bCUDA_ERROR_OUT_OF_MEMORY\b")
_RUNTIME_OOM = re.compile(r"CUDA error: out of memory\b|\bcudaErrorMemoryAllocation\b")
_CUBLAS = re.compile(r"\bCUBLAS_STATUS_ALLOC_FAILED\b")
_CUDNN = re.compile(r"\bCUDNN_STATUS_ALLOC_FAILED\b|\bCUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED\b")
_JAX_HINTS = ("XlaRuntimeError", "jaxlib", "jax.", "jax/")
_TF_HINTS = ("tensorflow", "ResourceExhaustedError", "Resource exhausted", "by allocator")
_TORCH_HINTS = ("torch", "Torch")


def _framework_of_xla(line: str, context: str) -> str:
    """XLA's text is JAX's unless the output reads as TensorFlow's."""
    if any(h in line for h in _JAX_HINTS) or any(h in context for h in _JAX_HINTS):
        return JAX
    if any(h in line for h in _TF_HINTS):
        return TENSORFLOW
    return JAX


def _framework_of_cuda(line: str) -> str:
    if any(h in line for h in _TORCH_HINTS):
        return PYTORCH
    if any(h in line for h in ("tensorflow", "cudnn handle", "cublas handle", "stream_executor")):
        return TENSORFLOW
    if "xla" in line.lower() or "jax" in line.lower():
        return JAX
    return CUDA


Matcher = Callable[[str, list[str], int, str], "OomText | None"]


def _torch_native(line: str, lines: list[str], i: int, context: str) -> OomText | None:
    m = _TORCH_TRIED.search(line)
    if m is not None:
        return OomText(PYTORCH, size_bytes(m.group(1), m.group(2)) or None, line, "torch-native")
    if _TORCH_1EB.search(line):
        return OomText(PYTORCH, None, line, "torch-1eb")
    return None


def _torch_async(line: str, lines: list[str], i: int, context: str) -> OomText | None:
    if not _TORCH_ASYNC.search(line):
        return None
    asked = None
    for follow in lines[i + 1:i + 4]:
        m = _TORCH_ASYNC_REQUESTED.search(follow)
        if m is not None:
            asked = size_bytes(m.group(1), m.group(2)) or None
            break
    return OomText(PYTORCH, asked, line, "torch-async")


def _xla(line: str, lines: list[str], i: int, context: str) -> OomText | None:
    if "Out of host memory" in line:
        return None
    m = _XLA_BYTES.search(line)
    if m is not None:
        return OomText(_framework_of_xla(line, context), int(m.group(1)) or None, line, "xla")
    m = _XLA_READABLE.search(line)
    if m is not None:
        return OomText(_framework_of_xla(line, context), size_bytes(m.group(1), m.group(2)) or None, line,
                       "xla-readable")
    return None


def _tf_tensor(line: str, lines: list[str], i: int, context: str) -> OomText | None:
    m = _TF_TENSOR.search(line)
    if m is None:
        return None
    return OomText(TENSORFLOW, tf_tensor_bytes(m.group(1), m.group(2)), line, "tf-tensor")


def _cuda(line: str, lines: list[str], i: int, context: str) -> OomText | None:
    m = _DRIVER_ALLOC.search(line)
    if m is not None:
        return OomText(_framework_of_cuda(line), int(m.group(1)) or None, line, "cuda-driver")
    if _DRIVER_OOM.search(line):
        return OomText(_framework_of_cuda(line), None, line, "cuda-driver")
    if _RUNTIME_OOM.search(line):
        return OomText(_framework_of_cuda(line), None, line, "cuda-runtime")
    if _CUBLAS.search(line):
        return OomText(_framework_of_cuda(line), None, line, "cublas")
    if _CUDNN.search(line):
        return OomText(_framework_of_cuda(line), None, line, "cudnn")
    return None


# most specific first: a line is taken by the first matcher that recognises it
MATCHERS: tuple[Matcher, ...] = (_torch_native, _torch_async, _xla, _tf_tensor, _cuda)

TEXTS: tuple[tuple[str, str, str], ...] = (
    ("torch-native", "CUDA out of memory. Tried to allocate <size>",
     "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp"),
    ("torch-1eb", "CUDA out of memory. Tried to allocate more than 1EB memory.",
     "pytorch/pytorch c10/cuda/CUDAMallocAsyncAllocator.cpp"),
    ("torch-async", "Allocation on device <n> would exceed allowed memory. (out of memory) / Requested : <size>",
     "pytorch/pytorch c10/cuda/CUDAMallocAsyncAllocator.cpp"),
    ("xla", "RESOURCE_EXHAUSTED: Out of memory while trying to allocate <n> bytes.",
     "openxla/xla xla/stream_executor/integrations/tf_allocator_adapter.cc"),
    ("xla-readable", "Out of memory while trying to allocate <n.nn>GiB", "real JAX logs; tsl HumanReadableNumBytes"),
    ("tf-tensor", "OOM when allocating tensor with shape[<dims>] and type <dtype> on <device> by allocator <name>",
     "tensorflow/tensorflow tensorflow/core/framework/op_kernel.cc"),
    ("cuda-driver", "failed to allocate <h> (<n> bytes) from device: CUDA_ERROR_OUT_OF_MEMORY",
     "tensorflow/tensorflow, openxla/xla stream_executor cuda_driver.cc"),
    ("cuda-runtime", "CUDA error: out of memory | cudaErrorMemoryAllocation", "CUDA runtime API; pytorch c10/cuda"),
    ("cublas", "CUBLAS_STATUS_ALLOC_FAILED", "cuBLAS status; pytorch aten/src/ATen/cuda/Exceptions.h"),
    ("cudnn", "CUDNN_STATUS_ALLOC_FAILED", "cuDNN status; pytorch aten/src/ATen/cudnn/Exceptions.h"),
)


def find_oom(tail: str) -> OomText | None:
    """The last framework out-of-memory text in ``tail`` (a job's output's end), or None."""
    if len(tail) > MAX_TAIL:
        tail = tail[-MAX_TAIL:]
    lines = [ln[:MAX_LINE] for ln in tail.splitlines()]
    context = "\n".join(lines[-200:])
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if not line.strip():
            continue
        for matcher in MATCHERS:
            found = matcher(line, lines, i, context)
            if found is not None:
                return found
    return None


# --- the texts a simulated job prints (`gpupack simgpu run --framework`) -----------------------

def format_size(n: int) -> str:
    """PyTorch's format_size (c10/cuda/CUDACachingAllocator.cpp): 'N bytes', '%.2f KiB|MiB|GiB'."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1024**2:
        return f"{n / 1024:.2f} KiB"
    if n <= 1024**3:
        return f"{n / 1024**2:.2f} MiB"
    return f"{n / 1024**3:.2f} GiB"


def render(framework: str, asked_bytes: int, held_bytes: int, total_bytes: int, device: int = 0) -> str:
    """The error a real ``framework`` process prints to stderr when an allocation of
    ``asked_bytes`` fails with ``held_bytes`` held on a device of ``total_bytes`` (the uncaught
    exception's last lines; the process then exits 1, a Python uncaught exception)."""
    if asked_bytes <= 0 or held_bytes < 0 or total_bytes <= 0:
        raise ValueError("asked_bytes and total_bytes must be positive, held_bytes not negative")
    free = max(0, total_bytes - held_bytes)
    if framework == PYTORCH:
        return ("Traceback (most recent call last):\n"
                '  File "train.py", line 42, in <module>\n'
                "    out = model(batch)\n"
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {format_size(asked_bytes)}. "
                f"GPU {device} has a total capacity of {format_size(total_bytes)} of which {format_size(free)} is "
                f"free. Including non-PyTorch memory, this process has {format_size(held_bytes)} memory in use. "
                f"Of the allocated memory {format_size(held_bytes)} is allocated by PyTorch, and 0 bytes is "
                "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")
    if framework == JAX:
        return ("Traceback (most recent call last):\n"
                '  File "train.py", line 42, in <module>\n'
                "    state = train_step(state, batch)\n"
                "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
                f"allocate {asked_bytes} bytes.\n")
    if framework == TENSORFLOW:
        n = max(1, asked_bytes // 4)
        return ("Traceback (most recent call last):\n"
                '  File "train.py", line 42, in <module>\n'
                "    model.fit(x, y)\n"
                "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\n"
                f"OOM when allocating tensor with shape[{n}] and type float on "
                f"/job:localhost/replica:0/task:0/device:GPU:{device} by allocator GPU_{device}_bfc\n")
    if framework == CUDA:
        return f"CUDA error at train.cu:42 code=2(cudaErrorMemoryAllocation) \"cudaMalloc(&p, {asked_bytes})\"\n"
    raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
