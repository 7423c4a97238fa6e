"""Run a function as an unprivileged user in a forked child (the test process runs as root).

The interpreter may live under /root (pyenv), which an unprivileged exec cannot reach, so the child
is forked after every module is imported and only then drops to ``nobody``.
"""
from __future__ import annotations

import json
import os
import traceback

NOBODY = 65534


def run_as_nobody(fn, *args, **kwargs):
    """Call ``fn(*args, **kwargs)`` as uid/gid 65534 in a forked child; return its JSON-able result.
    Raises ``RuntimeError`` with the child's traceback when it failed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = {"ok": fn(*args, **kwargs)}
        except BaseException:
            out = {"error": traceback.format_exc()}
        with os.fdopen(w, "w") as fh:
            json.dump(out, fh, default=str)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    res = json.loads(data)
    if "error" in res:
        raise RuntimeError(res["error"])
    return res["ok"]
