"""MUNGE credentials (Slurm's own authentication) for the helper <-> agent link.

:class:`Munge` encodes and decodes credentials through libmunge (``libmunge.so.2``, Debian's
``libmunge2``) with ctypes, talking to the munged at ``socket``; where the library is missing it
runs the ``munge``/``unmunge`` commands instead (about 20 times slower: a process per call, see
docs/multi-host.md for the figures).

Every credential's payload is a :class:`Claim`, JSON that binds what it was made for: the
target node, the HTTP method and path, the SHA-256 of the body, a random nonce and the time.
Requests carry one in ``Authorization: MUNGE <cred>``; the agent answers with one of its own in
``X-Gpupack-Munge`` whose claim binds the request's nonce and the answer body's hash.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import logging
import secrets
import shutil
import subprocess
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/run/munge/munge.socket.2")
HEADER = "Authorization"
ANSWER_HEADER = "X-Gpupack-Munge"
SCHEME = "MUNGE "
MAX_AGE_S = 60.0  # a claim older (or further in the future) than this is refused as expired

# libmunge's munge_opt_t and munge_err_t (munge.h)
_OPT_TTL = 4
_OPT_SOCKET = 8
EMUNGE_SOCKET = 6
EMUNGE_CRED_EXPIRED = 15
EMUNGE_CRED_REWOUND = 16
EMUNGE_CRED_REPLAYED = 17


class MungeError(RuntimeError):
    """munged refused or could not be reached; ``code`` is libmunge's munge_err_t (0: unknown)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


class CredentialRefused(Exception):
    """A request or answer whose credential is not accepted; ``status`` is the HTTP status."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Decoded:
    payload: bytes
    uid: int
    gid: int


class _LibMunge:
    def __init__(self, socket: Path):
        name = ctypes.util.find_library("munge") or "libmunge.so.2"
        self.lib = ctypes.CDLL(name)
        self.libc = ctypes.CDLL(None)
        self.socket = str(socket).encode()
        lib = self.lib
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_strerror.restype = ctypes.c_char_p
        lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
        lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint),
                                     ctypes.POINTER(ctypes.c_uint)]
        self.libc.free.argtypes = [ctypes.c_void_p]

    def _ctx(self, ttl: int | None) -> int:
        ctx = self.lib.munge_ctx_create()
        if not ctx:
            raise MungeError("munge_ctx_create failed (out of memory?)")
        self.lib.munge_ctx_set(ctypes.c_void_p(ctx), _OPT_SOCKET, ctypes.c_char_p(self.socket))
        if ttl is not None:
            self.lib.munge_ctx_set(ctypes.c_void_p(ctx), _OPT_TTL, ctypes.c_int(ttl))
        return ctx

    def _error(self, ctx: int, err: int, what: str) -> MungeError:
        text = self.lib.munge_ctx_strerror(ctypes.c_void_p(ctx))
        return MungeError(f"munge {what} via {self.socket.decode()}: "
                          f"{text.decode(errors='replace') if text else err}", err)

    def encode(self, payload: bytes, ttl: int | None) -> str:
        ctx = self._ctx(ttl)
        out = ctypes.c_void_p()
        try:
            err = self.lib.munge_encode(ctypes.byref(out), ctypes.c_void_p(ctx), payload, len(payload))
            if err:
                raise self._error(ctx, err, "encode")
            return ctypes.string_at(out).decode()
        finally:
            if out.value:
                self.libc.free(out)
            self.lib.munge_ctx_destroy(ctypes.c_void_p(ctx))

    def decode(self, cred: str) -> Decoded:
        ctx = self._ctx(None)
        buf, length = ctypes.c_void_p(), ctypes.c_int()
        uid, gid = ctypes.c_uint(), ctypes.c_uint()
        try:
            err = self.lib.munge_decode(cred.encode(), ctypes.c_void_p(ctx), ctypes.byref(buf), ctypes.byref(length),
                                        ctypes.byref(uid), ctypes.byref(gid))
            if err:
                raise self._error(ctx, err, "decode")
            payload = ctypes.string_at(buf, length.value) if buf.value else b""
            return Decoded(payload, uid.value, gid.value)
        finally:
            if buf.value:
                self.libc.free(buf)
            self.lib.munge_ctx_destroy(ctypes.c_void_p(ctx))


class _Commands:
    """The same through the ``munge``/``unmunge`` commands (a process per credential)."""

    def __init__(self, socket: Path):
        self.socket = str(socket)
        if not (shutil.which("munge") and shutil.which("unmunge")):
            raise MungeError("neither libmunge.so.2 nor the munge/unmunge commands are installed "
                             "(Debian: apt install munge libmunge2)")

    def encode(self, payload: bytes, ttl: int | None) -> str:
        args = ["munge", "-S", self.socket] + (["-t", str(ttl)] if ttl is not None else [])
        run = subprocess.run(args, input=payload, capture_output=True, timeout=10)
        if run.returncode:
            raise MungeError(f"munge: {run.stderr.decode(errors='replace').strip()}", run.returncode)
        return run.stdout.decode().strip()

    def decode(self, cred: str) -> Decoded:
        run = subprocess.run(["unmunge", "-S", self.socket, "-k", "UID,GID"], input=cred.encode(),
                             capture_output=True, timeout=10)
        if run.returncode:
            raise MungeError(f"unmunge: {run.stderr.decode(errors='replace').strip()}", run.returncode)
        # metadata lines "UID: name (0)", "GID: ...", a blank line, then the payload
        head, _, payload = run.stdout.partition(b"\n\n")
        ids = {}
        for line in head.decode().splitlines():
            key, _, value = line.partition(":")
            ids[key.strip()] = int(value.rsplit("(", 1)[1].rstrip(")"))
        return Decoded(payload, ids["UID"], ids["GID"])


class Munge:
    """Credentials through the munged at ``socket`` (libmunge, else the commands)."""

    def __init__(self, socket: Path | str | None = None, backend: str = "auto"):
        self.socket = Path(socket or DEFAULT_SOCKET)
        if backend not in ("auto", "lib", "commands"):
            raise ValueError(f"munge backend must be auto, lib or commands, got {backend!r}")
        impl = None
        if backend in ("auto", "lib"):
            try:
                impl = _LibMunge(self.socket)
            except OSError as exc:
                if backend == "lib":
                    raise MungeError(f"cannot load libmunge.so.2: {exc}") from exc
                log.info("libmunge not loadable (%s): using the munge/unmunge commands", exc)
        self._impl = impl or _Commands(self.socket)
        self.backend = "lib" if isinstance(self._impl, _LibMunge) else "commands"

    def encode(self, payload: bytes, ttl: int | None = None) -> str:
        return self._impl.encode(payload, ttl)

    def decode(self, cred: str) -> Decoded:
        return self._impl.decode(cred)


# -- claims -------------------------------------------------------------------------------
def body_hash(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class Claim:
    """What a credential was made for. An answer's claim has method "answer" and the path of the
    request, and its nonce is the request's."""

    node: str
    method: str
    path: str
    body_sha256: str
    nonce: str
    at: float

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, payload: bytes) -> "Claim":
        try:
            doc = json.loads(payload)
            return cls(str(doc["node"]), str(doc["method"]), str(doc["path"]), str(doc["body_sha256"]),
                       str(doc["nonce"]), float(doc["at"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CredentialRefused(401, f"the credential's payload is not a gpupack claim: {exc}") from None


def new_claim(node: str, method: str, path: str, body: bytes, clock=time.time) -> Claim:
    return Claim(node, method, path, body_hash(body), secrets.token_hex(16), clock())


#: nonces a cache holds at most (2 x MAX_AGE_S of requests at 800 a second); past it new requests
#: are refused until old nonces expire: a full cache never forgets one that could still be replayed
NONCES_MAX = 100_000


class NonceCache:
    """Nonces seen in the last ``keep_s`` seconds (a replay of any of them is refused), at most
    ``max_entries``: when it is full of nonces still within ``keep_s``, a new one is refused
    (:meth:`admit` says so) rather than an old one forgotten."""

    def __init__(self, keep_s: float, max_entries: int = NONCES_MAX):
        self.keep_s = keep_s
        self.max_entries = max_entries
        self._seen: set[str] = set()
        self._order: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()

    def admit(self, nonce: str, now: float) -> str | None:
        """None when ``nonce`` is new (it is kept), else why it is refused."""
        with self._lock:
            while self._order and self._order[0][0] < now - self.keep_s:
                self._seen.discard(self._order.popleft()[1])
            if nonce in self._seen:
                return "replayed credential (its nonce was seen already)"
            if len(self._seen) >= self.max_entries:
                return (f"{self.max_entries} nonces of the last {self.keep_s:.0f} s held: refusing new requests "
                        f"until older ones expire (a flood?)")
            self._seen.add(nonce)
            self._order.append((now, nonce))
            return None

    def add(self, nonce: str, now: float) -> bool:
        """False when ``nonce`` was seen already, or the cache is full."""
        return self.admit(nonce, now) is None

    def __len__(self) -> int:
        return len(self._seen)


def _decode(munge: Munge, header: str | None, who: str) -> Decoded:
    if not header or not header.startswith(SCHEME):
        raise CredentialRefused(401, f"{who} carries no MUNGE credential")
    try:
        decoded = munge.decode(header[len(SCHEME):].strip())
    except MungeError as exc:
        status = 503 if exc.code == EMUNGE_SOCKET else 401
        raise CredentialRefused(status, f"{who}'s credential refused: {exc}") from None
    return decoded


class RequestVerifier:
    """The agent's checks of a request's credential (all of them, in this order):
    munged accepts it (MAC, TTL, replay); it was made by an allowed uid; its claim names this
    node, this method and path and the body's hash; it is no older (or newer) than
    ``max_age_s`` by this host's clock; its nonce is new."""

    def __init__(self, munge: Munge, node: str, allowed_uids: set[int], max_age_s: float = MAX_AGE_S,
                 clock=time.time):
        self.munge = munge
        self.node = node
        self.allowed_uids = set(allowed_uids) | {0}
        self.max_age_s = max_age_s
        self.clock = clock
        self.nonces = NonceCache(2 * max_age_s)

    def verify_credential(self, header: str | None, method: str, path: str) -> tuple[Decoded, Claim]:
        """Every check that needs no body: the agent makes them before it reads a byte of it."""
        decoded = _decode(self.munge, header, "the request")
        if decoded.uid not in self.allowed_uids:
            raise CredentialRefused(403, f"uid {decoded.uid} may not command this agent "
                                         f"(root and the SlurmUser only)")
        claim = Claim.decode(decoded.payload)
        if claim.node != self.node:
            raise CredentialRefused(403, f"the credential was made for node {claim.node!r}, this is {self.node!r}")
        if claim.method != method or claim.path != path:
            raise CredentialRefused(401, f"the credential was made for {claim.method} {claim.path}, not {method} {path}")
        now = self.clock()
        if abs(now - claim.at) > self.max_age_s:
            raise CredentialRefused(401, f"the credential is expired: made {now - claim.at:+.0f} s ago "
                                         f"(at most {self.max_age_s:.0f} s; clocks out of step?)")
        return decoded, claim

    def check_body(self, claim: Claim, body: bytes) -> None:
        """The body is the one the credential was made for, and its nonce is new."""
        if claim.body_sha256 != body_hash(body):
            raise CredentialRefused(401, "the body does not match the credential's hash (tampered?)")
        why = self.nonces.admit(claim.nonce, self.clock())
        if why is not None:
            raise CredentialRefused(401 if why.startswith("replayed") else 503, why)


def sign_answer(munge: Munge, request: Claim, body: bytes, clock=time.time) -> str:
    """The agent's credential for its answer to ``request``."""
    claim = Claim(request.node, "answer", request.path, body_hash(body), request.nonce, clock())
    return SCHEME + munge.encode(claim.encode())


def check_answer(munge: Munge, header: str | None, request: Claim, body: bytes, signers: set[int],
                 max_age_s: float = MAX_AGE_S, clock=time.time) -> Decoded:
    """The helper's checks of an answer: signed by root or the SlurmUser, for this request
    (node, path, nonce), over this body, made within ``max_age_s`` of now by this host's clock
    (an answer carries its time; one made outside the window is refused)."""
    decoded = _decode(munge, header, "the answer")
    if decoded.uid not in set(signers) | {0}:
        raise CredentialRefused(403, f"the answer is signed by uid {decoded.uid}, not by root or the SlurmUser")
    claim = Claim.decode(decoded.payload)
    if (claim.node, claim.method, claim.path, claim.nonce) != (request.node, "answer", request.path, request.nonce):
        raise CredentialRefused(401, f"the answer's credential is for {claim.node} {claim.path} "
                                     f"nonce {claim.nonce[:8]}, not this request")
    if claim.body_sha256 != body_hash(body):
        raise CredentialRefused(401, "the answer's body does not match its credential (tampered?)")
    now = clock()
    if abs(now - claim.at) > max_age_s:
        raise CredentialRefused(401, f"the answer was made {now - claim.at:+.0f} s ago (at most {max_age_s:.0f} s; "
                                     f"an old answer, or clocks out of step)")
    return decoded


class PrivateMunged:
    """A munged of its own with a fresh key in a temporary folder (tests, `gpupack bench link`):
    ``with PrivateMunged() as m: Munge(m.socket)``. Needs root (munged --force) or the munge user."""

    def __init__(self) -> None:
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="gpupack-munged-"))
        self.dir.chmod(0o755)  # other uids may reach the socket (tests of non-root callers)
        self.socket = self.dir / "munge.socket"
        self.pid: int | None = None

    def __enter__(self) -> "PrivateMunged":
        import os

        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        pidfile = self.dir / "munged.pid"
        run = subprocess.run([shutil.which("munged") or "/usr/sbin/munged", f"--socket={self.socket}", f"--key-file={key}", f"--pid-file={pidfile}",
                              f"--log-file={self.dir / 'munged.log'}", f"--seed-file={self.dir / 'seed'}", "--force"],
                             capture_output=True, text=True, timeout=30)
        if run.returncode:
            raise MungeError(f"cannot start a private munged: {run.stderr.strip()}")
        self.pid = int(pidfile.read_text().split()[0])
        return self

    def __exit__(self, *exc) -> None:
        import os
        import signal

        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
