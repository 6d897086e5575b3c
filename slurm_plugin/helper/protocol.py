"""The wire format between job_submit.lua and the controller helper.

Request (bytes; values may hold anything, including newlines and non-UTF-8 bytes)::

    GPUPACK/1\n
    <key> <length>\n<length bytes>\n      (repeated)
    END\n

Response: one line of tab-separated ``key=value`` pairs, ``\n``-terminated. Values are
written by the helper and never contain tabs or newlines.
"""
from __future__ import annotations

import re

MAGIC = b"GPUPACK/1\n"
END = b"END\n"
MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_FIELDS = 64


class ProtocolError(ValueError):
    """A request that does not follow the format; the message says where it broke."""


def encode_request(fields: dict[str, bytes | str]) -> bytes:
    out = [MAGIC]
    for key, value in fields.items():
        data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        out.append(f"{key} {len(data)}\n".encode() + data + b"\n")
    out.append(END)
    return b"".join(out)


_HEADER = re.compile(rb"([A-Za-z0-9_]{1,64}) ([0-9]{1,10})\n")
_PARTIAL_HEADER = re.compile(rb"[A-Za-z0-9_]{0,64}( [0-9]{0,10})?")  # what a header cut short may be
_HEADER_MAX = 64 + 1 + 10 + 1


def split_request(buffer: bytes) -> tuple[dict[str, bytes], int] | None:
    """The first request in `buffer` and the offset just after its ``END``; None while more
    bytes are needed. Raises ProtocolError as soon as the bytes cannot be a request."""
    if not buffer.startswith(MAGIC):
        if MAGIC.startswith(buffer[: len(MAGIC)]):
            return None
        raise ProtocolError("request does not start with GPUPACK/1")
    size = len(buffer)
    pos = len(MAGIC)
    fields: dict[str, bytes] = {}
    header = _HEADER.match  # one C call reads and checks a field header
    while True:
        if buffer.startswith(END, pos):
            return fields, pos + len(END)
        found = header(buffer, pos)
        if found is None:
            tail = buffer[pos:pos + _HEADER_MAX]
            if b"\n" in tail or _PARTIAL_HEADER.fullmatch(tail) is None:
                raise ProtocolError(f"bad field header {bytes(tail[:40])!r}")
            return None  # a header cut short: wait for the rest
        start = found.end()
        stop = start + int(found.group(2))
        if stop >= size:
            return None
        if buffer[stop] != 0x0A:
            raise ProtocolError(f"field {found.group(1).decode()} is longer than its stated "
                                f"{found.group(2).decode()} bytes")
        fields[found.group(1).decode("ascii")] = buffer[start:stop]
        if len(fields) > MAX_FIELDS:
            raise ProtocolError("too many fields")
        pos = stop + 1


def decode_request(data: bytes) -> dict[str, bytes]:
    """Parse a complete request; raise ProtocolError on anything malformed or cut short."""
    parsed = split_request(data)
    if parsed is None:
        raise ProtocolError(f"request cut short after {len(data)} bytes")
    return parsed[0]


def request_complete(buffer: bytes) -> bool:
    """True once `buffer` holds a whole request, or bytes that can never become one."""
    try:
        return split_request(buffer) is not None
    except ProtocolError:
        return True


def encode_response(fields: dict[str, str]) -> bytes:
    parts = []
    for key, value in fields.items():
        text = str(value)
        if "\t" in text or "\n" in text:
            raise ValueError(f"response field {key} holds a tab or newline")
        parts.append(f"{key}={text}")
    return ("\t".join(parts) + "\n").encode("utf-8")


def decode_response(line: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in line.decode("utf-8").rstrip("\n").split("\t"):
        key, _, value = part.partition("=")
        out[key] = value
    return out
