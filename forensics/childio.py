"""Reading a child process's output without ever waiting on the child past a deadline.

A child stuck in the kernel (state D: a driver that stopped answering) keeps its end of the pipe open and
cannot be killed, so neither ``communicate()`` nor a read until EOF may be trusted to return; the reader
below waits for data with a deadline and stops at a byte bound. Killing and reaping stay the caller's
(collectors/nvidia_host/smi.py; collectors/containers/probe.py reads its child the same way).

A forked child that starts children of its own (the journal's reader and its readers) leads a process
group (:func:`lead_group`) and dies with its parent (:func:`die_with_parent`); :func:`kill_group`
kills it with all it started, on every way out of the parent (a second Ctrl-C, an exception).
"""
from __future__ import annotations

import os
import select
import signal
import time

PIECE = 65536  #: bytes read at a time


def read_until(stream, deadline: float, limit: int) -> tuple[bytes, bool, bool]:
    """What the child writes to the pipe ``stream`` (a file object with ``fileno()``) until end of file,
    ``deadline`` (a ``time.monotonic()`` value) or ``limit`` bytes: ``(bytes, timed out, cut at the
    limit)``; at most ``limit`` bytes are returned. Raises ``OSError`` from the read."""
    fd = stream.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        wait_ms = int((deadline - time.monotonic()) * 1000)
        if wait_ms <= 0:
            return b"".join(chunks), True, False
        chunk = os.read(fd, PIECE) if poller.poll(wait_ms) else None
        if chunk == b"":
            return b"".join(chunks), False, False
        if chunk:
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)[:limit], False, True


PR_SET_PDEATHSIG = 1  #: prctl(2) option: the signal this process gets when its parent thread ends
REAP_S = 5.0          #: seconds :func:`kill_group` waits for a killed group's processes to be reaped


def die_with_parent(parent: int) -> None:
    """In a forked child, first thing: ask for SIGKILL when the parent ``parent`` (its pid) ends,
    however it ends (prctl(2) ``PR_SET_PDEATHSIG``: a parent killed outright, by the OOM killer or
    ``timeout -k``, has no chance to kill its children); exits at once when the parent is gone
    already (it died between fork(2) and here)."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(70)


def lead_group() -> None:
    """In a forked child: lead a process group of its own (setpgid(2)), so that :func:`kill_group`
    reaches it and every process it starts (which stay in the group) with one kill. Signals a terminal
    sends to its foreground group (Ctrl-C) then reach the parent only, whose to answer they are. SIGTTOU
    is ignored: a background group writing a traceback to a terminal set ``tostop`` would be stopped."""
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    os.setpgid(0, 0)


def kill_group(pid: int) -> None:
    """SIGKILL to child ``pid`` and to the process group it leads (:func:`lead_group`: its own
    children), then reap it; its children, reparented (to init, or to this process when it is PID 1
    in a container), are reaped here when they became this process's, for at most :data:`REAP_S`
    seconds (a process in state D dies only when the kernel lets it). Nothing when it is gone already."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except OSError:
            pass
    end = time.monotonic() + REAP_S
    for target in (pid, -pid):  # the child, then what of its group became this process's
        while True:
            try:
                got, _status = os.waitpid(target, os.WNOHANG)
            except ChildProcessError:
                break
            if got and target == pid:
                break
            if time.monotonic() >= end:
                return
            if not got:
                time.sleep(0.01)
