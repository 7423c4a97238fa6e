"""The timeline picture drawn in a child process, beside the rest of ``analyze``.

Importing matplotlib (~1 s) and drawing a busy node's picture (~2.5 s on the L bench) are the largest
part of writing the reports, and they need nothing but the analysis. :meth:`ChartChild.start` forks a
child at the start of ``analyze``, which imports :mod:`reports.chart` while the parent reads the bundle
and correlates; :meth:`ChartChild.send` hands it what the picture reads (:func:`chart_input`) once the
verdicts are printed, and the parent renders the HTML tables, report.md and analysis.json while the
child draws; :meth:`ChartChild.svg` takes the picture back. The parent writes every file.

The child is only a faster path to the same bytes: when it cannot be forked (threads already run, so a
forked child could inherit a lock held by one of them; no ``os.fork``) or gives no picture (it failed,
died or was killed), the parent draws in-process with :func:`reports.chart.figures`, so the
output and any error are those of drawing it there.
"""
from __future__ import annotations

import gc
import os
import pickle
import signal
import struct
import sys
import threading

from forensics.output import write_all

#: the timeline kinds whose ``attrs`` the picture reads (reports/styles.py ``style``: a probe's result;
#: reports/chart.py ``_requester``: a reload's requester); the others are drawn by time and kind alone
_ATTR_KINDS = ("journal.reload", "container.probe")


def chart_input(a: dict) -> dict:
    """What :func:`reports.chart.timeline_svg` reads of the analysis ``a``: its ``node``,
    ``collected_at``, ``timezone``, ``incidents`` and ``gaps`` as they are, and of ``timeline`` only the
    entries drawn as markers (:func:`reports.styles.style` not ``None``), each as ``at``, ``kind`` and,
    for the kinds in :data:`_ATTR_KINDS`, ``attrs``. ``timeline_svg`` draws the same picture from it."""
    from .styles import style
    timeline = [{"at": e.get("at"), "kind": e.get("kind"),
                 **({"attrs": e.get("attrs")} if e.get("kind") in _ATTR_KINDS else {})}
                for e in a.get("timeline") or [] if style(e)]
    return {"node": a.get("node"), "collected_at": a.get("collected_at"), "timezone": a.get("timezone"),
            "incidents": a.get("incidents"), "gaps": a.get("gaps"), "timeline": timeline}


def _read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``, or ``None`` at an end of file before them."""
    parts, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            return None
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _frame(data: bytes) -> bytes:
    return struct.pack("!Q", len(data)) + data


def _read_frame(fd: int) -> bytes | None:
    head = _read_exact(fd, 8)
    return None if head is None else _read_exact(fd, struct.unpack("!Q", head)[0])


class ChartChild:
    """A forked process that draws the timeline picture of one analysis (see the module's text). Use
    ``start()``, then ``send(a)`` and ``svg(a)``; ``close()`` ends it (a ``with`` block calls it)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._to = self._from = -1
        self._sent = False
        self.from_child = False  # whether svg() returned the child's picture

    def start(self) -> "ChartChild":
        """Fork the child, which imports :mod:`reports.chart` and waits for its input. Does nothing
        when threads run besides this one or the platform has no ``fork``; the parent then draws."""
        if self.pid is not None or not hasattr(os, "fork") or threading.active_count() != 1:
            return self
        for stream in (sys.stdout, sys.stderr):  # what they hold is printed once, by the parent
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        down, up = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.close(down[1])
                os.close(up[0])
                code = _child(down[0], up[1])
            finally:
                os._exit(code)
        os.close(down[0])
        os.close(up[1])
        self.pid, self._to, self._from = pid, down[1], up[0]
        return self

    def send(self, a: dict) -> None:
        """Hand the child :func:`chart_input` of ``a`` to draw (no-op without a child)."""
        if self.pid is None or self._sent:
            return
        self._sent = True
        try:
            write_all(self._to, _frame(pickle.dumps(chart_input(a), protocol=pickle.HIGHEST_PROTOCOL)))
        except OSError:  # the child is gone: svg() draws in-process
            self.close()
        else:
            os.close(self._to)
            self._to = -1

    def svg(self, a: dict) -> str:
        """The pictures of ``a``, as :func:`reports.chart.figures` draws them: the child's, or drawn
        here when there is no child or it gave none (its error, if any, is raised here as it would be
        without a child)."""
        self.send(a)
        answer = None
        if self.pid is not None:
            try:
                answer = _read_frame(self._from)
            except OSError:
                answer = None
            self.close()
        if answer and answer[:1] == b"0":
            self.from_child = True
            return answer[1:].decode("utf-8")
        from .chart import figures  # matplotlib is imported here only when the child gave no picture
        return figures(a)

    def close(self) -> None:
        """End the child (if it still runs) and reap it; idempotent."""
        for fd in (self._to, self._from):
            if fd >= 0:
                os.close(fd)
        self._to = self._from = -1
        if self.pid is not None:
            pid, self.pid = self.pid, None
            try:
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def __enter__(self) -> "ChartChild":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _child(inp: int, out: int) -> int:
    """The child's work: import the chart, read one framed pickle of :func:`chart_input` from ``inp``,
    write ``b"0"`` + the SVG (UTF-8) framed to ``out``; ``b"1"`` when drawing raised. Returns the exit
    code. Ctrl-C (the terminal signals the whole process group) is the parent's to handle: the child
    ignores SIGINT and ends when the parent closes the pipe or kills it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    gc.freeze()  # the parent's objects: never walked again here, nor their pages copied for it
    try:
        from .chart import figures
    except Exception:
        figures = None
    data = _read_frame(inp)
    if data is None:
        return 0
    try:
        if figures is None:
            raise ImportError("reports.chart")
        answer = b"0" + figures(pickle.loads(data)).encode("utf-8")
    except Exception:
        answer = b"1"
    try:
        write_all(out, _frame(answer))
    except OSError:
        return 1
    return 0
