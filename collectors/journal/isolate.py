"""Reading journal files in a child process, so that a file cut short under libsystemd costs that file only.

libsystemd reads a journal file through ``mmap``; when the file shrinks while it is mapped
(journald's vacuum deleting or truncating it, a full disk), touching a page past the new end raises
SIGBUS (mmap(2): "Attempted access to a portion of the buffer that does not correspond to the
file"), which kills the whole process. :func:`in_child` runs the reading in a ``fork`` ed child and
hands back what it returned (pickled through a pipe), or how it died.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback

from forensics import childio


def portable(e: Exception) -> Exception:
    """``e`` itself when it survives pickling, else a ``RuntimeError`` naming it."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


def in_child(fn, *args):
    """Run ``fn(*args)`` in a forked child. Returns ``(result, None)``, or ``(None, how)`` when the
    child died: ``how`` is the signal's name (``"SIGBUS"``) or ``"exit N"``. Raises what ``fn``
    raised when it raised an ``Exception`` (:func:`portable`; its traceback goes to stderr). An
    interruption of this process (``KeyboardInterrupt``, any ``BaseException`` while waiting) kills
    and reaps the child before it propagates."""
    return finish(*start(fn, *args))


def start(fn, *args, group: bool = False) -> tuple[int, int]:
    """Fork a child running ``fn(*args)``; ``(pid, read end of its result pipe)`` for :func:`finish`.
    The child dies with this process (:func:`forensics.childio.die_with_parent`); with ``group``
    it leads a process group, so that :func:`kill` ends the children it starts with it."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            childio.die_with_parent(parent)
            if group:
                childio.lead_group()
            os.close(r)
            _own_streams()
            try:
                out = ("ok", fn(*args))
            except Exception as e:
                traceback.print_exc(limit=4)
                out = ("raised", portable(e))
            data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(w, "wb") as fh:
                fh.write(data)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    if group:
        try:  # as the child does: whichever runs first, the group exists before this returns
            os.setpgid(pid, pid)
        except OSError:
            pass
    return pid, r


def _own_streams() -> None:
    """In a child: ``sys.stdout`` and ``sys.stderr`` anew on descriptors 1 and 2. The parent's may be
    locked by a thread that was not forked (rich's progress bar draws from its refresh thread, and
    its proxy of stderr takes the console's lock): the child's first write (a traceback) would wait
    for it forever, and the parent for the child."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        try:
            setattr(sys, name, open(fd, "w", closefd=False, errors="backslashreplace", buffering=1))
        except OSError:  # no such descriptor: the old stream is kept
            pass


def kill(pid: int) -> None:
    """Kill and reap child ``pid`` (one :func:`start` made) and the process group it leads, if any
    (:func:`forensics.childio.kill_group`); nothing when it is gone already."""
    childio.kill_group(pid)


def finish(pid: int, r: int):
    """Wait for the child :func:`start` made; as :func:`in_child`."""
    try:
        with os.fdopen(r, "rb") as fh:
            data = fh.read()
        _, status = os.waitpid(pid, 0)
    except BaseException:
        kill(pid)
        raise
    if os.WIFSIGNALED(status):
        return None, signal.Signals(os.WTERMSIG(status)).name
    if os.WEXITSTATUS(status) or not data:
        return None, f"exit {os.WEXITSTATUS(status)}"
    kind, value = pickle.loads(data)
    if kind == "raised":
        raise value
    return value, None
