"""The ctypes side of the fake ``libnvidia-ml.so.1``.

``pynvml`` loads the NVML shared library into the global ``pynvml.nvmlLib`` and looks each
C function up with ``getattr(nvmlLib, name)`` (``pynvml._nvmlGetFunctionPointer``).
:class:`Library` stands in for that library object. Each exported name is an
:class:`Export`, a ``ctypes.CFUNCTYPE`` function pointer whose prototype follows the C
declaration in ``nvml.h``, so every call made by pynvml's unmodified wrappers goes through
ctypes argument conversion exactly as a call into the real library does:

- handles are typed (``nvmlDevice_t``, ``nvmlGpuInstance_t``, ``nvmlComputeInstance_t``):
  passing a GPU-instance handle where a device handle is expected raises
  ``ctypes.ArgumentError`` in the caller;
- out-parameters are typed pointers to pynvml's structs: passing a wrong struct, a Python
  int or an unpointed value raises ``ctypes.ArgumentError``;
- the C side writes through those pointers using the fake's *own* copies of the
  ``nvml.h`` struct layouts (:mod:`.nvml_h`, checked against pynvml's at import), and
  checks the ``version`` field of versioned structs as NVML does;
- the caller's buffers are checked for size where NVML says "must be large enough"
  (a too-small buffer would be a memory overwrite on real hardware; here it is recorded
  in ``FakeNvml.violations`` and refused).

The prototypes themselves are the export table in :mod:`.library`.
"""
from __future__ import annotations

import ctypes
from ctypes import CFUNCTYPE
from typing import TYPE_CHECKING, Any, Callable

from .nvml_h import ERROR_INVALID_ARGUMENT

if TYPE_CHECKING:
    from .calls import NvmlCalls


class Export:
    """One exported C function: a CFUNCTYPE pointer, called through ctypes marshalling.

    Also remembers the Python-side size of array arguments for the duration of the call,
    so the C side can check "must be large enough" buffers.
    """

    def __init__(self, fake: NvmlCalls, name: str, restype: Any, argtypes: list,
                 impl: Callable):
        self._fake, self._name, self._impl = fake, name, impl

        def thunk(*args):
            return fake._dispatch(name, impl, args)

        self._cfunc = CFUNCTYPE(restype, *argtypes)(thunk)
        self._thunk = thunk  # keep alive

    def __call__(self, *args):
        sizes = []
        for k, a in enumerate(args):
            if isinstance(a, (ctypes.Structure, ctypes.Union)):
                # the real CDLL functions have no argtypes: a struct would be passed *by
                # value* where NVML reads a pointer (our prototype would byref it silently)
                self._fake.violations.append(
                    f"{self._name}: argument {k + 1} is a {type(a).__name__} passed by "
                    f"value; pass ctypes.byref(...)")
                return ERROR_INVALID_ARGUMENT
            if isinstance(a, ctypes.Array):
                sizes.append(len(a))
            else:
                sizes.append(None)
        self._fake._arg_sizes.append(sizes)
        try:
            return self._cfunc(*args)
        finally:
            self._fake._arg_sizes.pop()

    # pynvml sets ``fn.restype = c_char_p`` on nvmlErrorString
    @property
    def restype(self):
        return self._cfunc.restype

    @restype.setter
    def restype(self, value):
        self._cfunc.restype = value


class Library:
    """Stands in for ``CDLL("libnvidia-ml.so.1")``: attributes are the exported functions;
    a name that is not exported raises AttributeError (pynvml: FUNCTION_NOT_FOUND)."""

    def __repr__(self) -> str:
        return "<fake libnvidia-ml.so.1>"
