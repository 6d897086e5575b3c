"""What the C side of every exported function shares.

Each exported function (:mod:`.exports`) calls :meth:`NvmlCalls._dispatch`, which logs the
call, refuses calls before ``nvmlInit``, gives injected failures, and turns misuse into
``NVML_ERROR_INVALID_ARGUMENT`` (recorded in ``violations``) and a bug in the fake into
``NVML_ERROR_UNKNOWN`` (recorded in ``errors``), never into ``NVML_SUCCESS``. The helpers
below do what NVML's C code does with its arguments, or would crash on: NULL pointers,
handles of the wrong kind or already destroyed, out-parameters written through the
caller's pointers, buffers too small for what NVML writes.
"""
from __future__ import annotations

import ctypes
import traceback
from contextlib import AbstractContextManager, nullcontext
from ctypes import POINTER, c_void_p, cast
from typing import Callable, Iterable

from .model import FakeGpu, FakeMigDevice, NvmlObject
from .nvml_h import (ERROR_INSUFFICIENT_SIZE, ERROR_INVALID_ARGUMENT, ERROR_UNINITIALIZED,
                     ERROR_UNKNOWN, SUCCESS)


class NvmlViolation(AssertionError):
    """A call that real NVML would answer with undefined behaviour or a usage error."""


class NvmlCalls:
    """Base of the C functions' mixins: the state they share and the checks they use.

    The C functions (``_impl(*args)``) return ``None`` for ``NVML_SUCCESS`` or a return
    code, and raise :class:`NvmlViolation` for misuse. :class:`~.library.FakeNvml` sets
    the attributes declared here.
    """

    gpus: list[FakeGpu]
    init_count: int
    calls: list[tuple[str, tuple]]
    violations: list[str]
    errors: list[str]
    fail: dict[str, int]
    _arg_sizes: list[list[int | None]]  # array lengths of the calls in progress

    def _dispatch(self, name: str, impl: Callable, args: tuple) -> int:
        self.calls.append((name, tuple(a if isinstance(a, (int, type(None))) else "*"
                                       for a in args)))
        try:
            if name not in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlErrorString") \
                    and self.init_count <= 0:
                return ERROR_UNINITIALIZED
            if name in self.fail:
                return self.fail.pop(name)
            with self._backing(name):
                ret = impl(*args)
            return SUCCESS if ret is None else ret
        except NvmlViolation as exc:
            self.violations.append(f"{name}: {exc}")
            return ERROR_INVALID_ARGUMENT
        except Exception:  # a bug in the fake must not look like NVML_SUCCESS
            self.errors.append(f"{name}: {traceback.format_exc()}")
            return ERROR_UNKNOWN

    def _backing(self, name: str) -> AbstractContextManager:
        """Around each call: where the model's state comes from and goes to (in memory
        here; the simulated GPU's shared file in :mod:`.shared`)."""
        return nullcontext()

    def _violation(self, msg: str) -> NvmlViolation:
        return NvmlViolation(msg)

    def _capacity(self, arg_pos: int) -> int | None:
        sizes = self._arg_sizes[-1] if self._arg_sizes else []
        return sizes[arg_pos] if arg_pos < len(sizes) else None

    @staticmethod
    def _addr(ptr) -> int | None:
        return cast(ptr, c_void_p).value

    def _objects(self) -> Iterable[NvmlObject]:
        for g in self.gpus:
            yield g
            for gi in g.gis.values():
                yield gi
                for ci in gi.cis.values():
                    yield ci
                    yield ci.mig_device

    def _lookup(self, ptr, kinds: tuple[type, ...], what: str):
        addr = self._addr(ptr)
        if addr is None:
            raise self._violation(f"{what} handle is NULL")
        for obj in self._objects():
            if obj.addr == addr:
                if not isinstance(obj, kinds):
                    raise self._violation(f"{what} handle points at a {type(obj).__name__}")
                return obj
        raise self._violation(f"{what} handle {addr:#x} is not valid (destroyed or never "
                              f"returned by NVML)")

    def _device(self, ptr) -> FakeGpu | FakeMigDevice:
        return self._lookup(ptr, (FakeGpu, FakeMigDevice), "device")

    def _parent(self, ptr) -> FakeGpu:
        dev = self._device(ptr)
        if isinstance(dev, FakeMigDevice):
            # MIG device handles are not parent devices: NVML answers INVALID_ARGUMENT
            # or NOT_SUPPORTED for MIG management calls on them
            raise self._violation("a MIG device handle was passed where NVML needs the "
                                  "parent GPU handle")
        return dev

    @staticmethod
    def _need(ptr, what: str) -> None:
        if not ptr:
            raise NvmlViolation(f"{what} is NULL")

    @staticmethod
    def _out(ptr, struct: type):
        return cast(ptr, POINTER(struct)).contents

    @staticmethod
    def _set_handle(ptr, obj: NvmlObject) -> None:
        cast(ptr, POINTER(c_void_p))[0] = obj.addr

    @staticmethod
    def _write_str(buf, length: int, text: str) -> int:
        data = text.encode() + b"\0"
        if len(data) > length:
            return ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buf, data, len(data))
        return SUCCESS
