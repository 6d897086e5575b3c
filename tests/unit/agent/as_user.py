"""Run a function as user nobody, in a child process: what an unprivileged local user can do."""
from __future__ import annotations

import os
import pwd


def as_nobody(fn) -> str:
    """Run fn() in a child process as user nobody; returns what it returned (its repr), or
    "error <exception>" when it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            nobody = pwd.getpwnam("nobody")
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            out = repr(fn())
        except BaseException as exc:  # report it to the parent
            out = f"error {exc!r}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return data.decode()
