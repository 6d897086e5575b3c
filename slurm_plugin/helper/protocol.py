"""The wire format between job_submit.lua and the controller helper.

Request (bytes; values may hold anything, including newlines and non-UTF-8 bytes)::

    GPUPACK/1\n
    <key> <length>\n<length bytes>\n      (repeated)
    END\n

Response: one line of tab-separated ``key=value`` pairs, ``\n``-terminated. Values are
written by the helper and never contain tabs or newlines.
"""
from __future__ import annotations

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


def decode_request(data: bytes) -> dict[str, bytes]:
    """Parse a complete request; raise ProtocolError on anything malformed."""
    if not data.startswith(MAGIC):
        raise ProtocolError("request does not start with GPUPACK/1")
    pos = len(MAGIC)
    fields: dict[str, bytes] = {}
    while True:
        if data.startswith(END, pos):
            return fields
        newline = data.find(b"\n", pos, pos + 128)
        if newline < 0:
            raise ProtocolError(f"no field header at byte {pos}")
        header = data[pos:newline].decode("ascii", "replace").split(" ")
        if len(header) != 2 or not header[1].isdigit() or not header[0].replace("_", "").isalnum():
            raise ProtocolError(f"bad field header {data[pos:newline][:40]!r}")
        key, length = header[0], int(header[1])
        start, stop = newline + 1, newline + 1 + length
        if stop + 1 > len(data) or data[stop : stop + 1] != b"\n":
            raise ProtocolError(f"field {key} is shorter than its stated {length} bytes")
        fields[key] = data[start:stop]
        if len(fields) > MAX_FIELDS:
            raise ProtocolError("too many fields")
        pos = stop + 1


def request_end(buffer: bytes | bytearray) -> int | None:
    """Where the first request in `buffer` ends (the offset just after its ``END``), or None
    while more bytes are needed. Garbage ends at once (the whole buffer), so that the reader
    stops and :func:`decode_request` says what is wrong with it."""
    if not buffer.startswith(MAGIC):
        return len(buffer) if len(buffer) >= len(MAGIC) or not MAGIC.startswith(buffer) else None
    pos = len(MAGIC)
    while True:
        if buffer.startswith(END, pos):
            return pos + len(END)
        newline = buffer.find(b"\n", pos, pos + 128)
        if newline < 0:
            return len(buffer) if len(buffer) - pos >= 128 else None  # a header that long is malformed
        header = buffer[pos:newline].split(b" ")
        if len(header) != 2 or not header[1].isdigit():
            return len(buffer)
        pos = newline + 1 + int(header[1]) + 1
        if pos > len(buffer):
            return None


def request_complete(buffer: bytes) -> bool:
    """True once `buffer` holds a whole request (cheap check used while reading)."""
    return request_end(buffer) is not None


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
