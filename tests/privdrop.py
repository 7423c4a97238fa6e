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


def share(root) -> None:
    """Make the tree at ``root`` readable by anyone (directories 0755, files 0644, links left alone), so that
    only the modes a test sets afterwards keep ``nobody`` out."""
    from pathlib import Path
    for p in [Path(root), *Path(root).rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, 0o755 if p.is_dir() else 0o644)


def outbox(work):
    """``work/out``, writable by anyone: where a child running as nobody writes its bundle."""
    from pathlib import Path
    out = Path(work) / "out"
    out.mkdir(exist_ok=True)
    os.chmod(out, 0o777)
    return out
