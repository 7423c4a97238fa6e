"""The timeline picture drawn in a child process, beside the rest of ``analyze``.

Importing matplotlib (~0.5-1 s) and drawing a busy node's picture (~2.5 s on the L bench) are the largest
part of writing the reports, and they need nothing but the analysis. :meth:`ChartChild.start` starts a
child at the start of ``analyze``: a fresh interpreter (``sys.executable -I``, the same one, with this
project's directory and then the parent's import path first on its own) that imports
:mod:`reports.chart` while the parent reads the bundle and correlates; :meth:`ChartChild.send` hands it
what the picture reads (:func:`chart_input`) once the verdicts are printed, and the parent renders the
HTML tables, report.md and analysis.json while the child draws; :meth:`ChartChild.svg_utf8` takes the
picture back. The parent writes every file; the child writes none and its stderr goes nowhere.

A fresh interpreter rather than a fork: a forked child's resident memory counts every page it shares
with the parent (the parent's imports, and whatever it holds when the fork happens), and a fork is
unsafe once a thread runs. The child is only a faster path to the same bytes: when it cannot start, gives no
picture (it failed, died or was killed) or does not answer within :data:`WAIT_S`, the parent draws
in-process with :func:`reports.chart.figures`, so the output and any error are those of drawing it
there.
"""
from __future__ import annotations

import gc
import itertools
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

#: seconds the parent waits for the child to take its input and to answer, each (the L bench's picture
#: takes ~3 s); then the child is killed and the picture drawn in-process
WAIT_S = 120.0
#: the child's program: this project's directory, then the parent's import path (its arguments) before its
#: own, then :func:`_serve`
_CHILD = "import sys; sys.path[:0] = sys.argv[1:]; from reports.chartproc import _serve; sys.exit(_serve())"

#: the timeline kinds whose ``attrs`` the picture reads (reports/styles.py ``style``: a probe's result;
#: reports/chart.py ``_requester``: a reload's requester); the others are drawn by time and kind alone
_ATTR_KINDS = ("journal.reload", "container.probe")


def chart_input(a: dict) -> dict:
    """What :func:`reports.chart.timeline_svg` reads of the analysis ``a``: its ``node``,
    ``collected_at``, ``timezone``, ``incidents`` and ``gaps`` as they are, and of ``timeline`` only the
    entries drawn as markers (:func:`_drawn`). ``timeline_svg`` draws the same picture from it."""
    return {**_head(a), "timeline": list(_drawn(a))}


def _head(a: dict) -> dict:
    return {"node": a.get("node"), "collected_at": a.get("collected_at"), "timezone": a.get("timezone"),
            "incidents": a.get("incidents"), "gaps": a.get("gaps")}


def _drawn(a: dict):
    """The entries of ``a``'s timeline drawn as markers (:func:`reports.styles.style` not ``None``), each as
    a tuple ``(at, kind)``, or ``(at, kind, attrs)`` for the kinds in :data:`_ATTR_KINDS`; an entry of the same
    time and kind as one before it at that time, and without attrs, is left out (its marker would be drawn on
    the first one's). Issue 30: a tuple is a quarter of a dict, in the pipe and in the child."""
    from .styles import style
    now, seen = None, set()  # the kinds seen at time ``now`` (the timeline is in time order)
    for e in a.get("timeline") or []:
        if not style(e):
            continue
        at, kind = e.get("at"), e.get("kind")
        if kind in _ATTR_KINDS:
            yield at, kind, e.get("attrs")
            continue
        if at != now:
            now, seen = at, set()
        if isinstance(kind, str):
            if kind in seen:
                continue
            seen.add(kind)
        yield at, kind


#: timeline entries pickled together: :func:`chart_input` goes to the child as its head, then batches of the
#: timeline, then an empty batch (a busy node's whole input pickled at once was 3 MB of the parent's peak)
BATCH = 2048


def _frames(a: dict):
    """:func:`chart_input` of ``a`` as the pickles the child reads (:func:`_read_input`): the head, the
    timeline in batches of :data:`BATCH`, an empty batch."""
    yield pickle.dumps(_head(a), protocol=pickle.HIGHEST_PROTOCOL)
    entries = _drawn(a)
    while batch := list(itertools.islice(entries, BATCH)):
        yield pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
    yield pickle.dumps([], protocol=pickle.HIGHEST_PROTOCOL)


def _read_input(fd: int) -> dict | None:
    """:func:`chart_input` as :func:`_frames` sent it, or ``None`` when the input ends before its last batch
    (the parent gave up: nothing to draw)."""
    head = _read_frame(fd)
    if head is None:
        return None
    a, timeline = pickle.loads(head), []
    while (frame := _read_frame(fd)) is not None:
        batch = pickle.loads(frame)
        if not batch:
            a["timeline"] = timeline
            return a
        timeline += batch
    return None


def _wait(fd: int, write: bool, deadline: float | None) -> bool:
    """Whether ``fd`` is ready (to write when ``write``, else to read; a closed other end counts, so that
    the read or write says so) before ``deadline`` (``time.monotonic()``; ``None``: no limit)."""
    poller = select.poll()  # not select(): a descriptor past FD_SETSIZE is fine
    poller.register(fd, select.POLLOUT if write else select.POLLIN)
    left = None if deadline is None else max(0, round((deadline - time.monotonic()) * 1000))
    return bool(poller.poll(left))


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytearray | None:
    """``n`` bytes from ``fd`` (read into one buffer), or ``None`` at an end of file before them;
    ``TimeoutError`` when they have not come by ``deadline`` (``time.monotonic()``; ``None``: no limit)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        if not _wait(fd, False, deadline):
            raise TimeoutError("no answer from the chart's child")
        k = os.readv(fd, [view[got:got + (1 << 20)]])
        if not k:
            return None
        got += k
    view.release()
    return buf


def _write_within(fd: int, data: bytes, deadline: float | None = None) -> None:
    """Write all of ``data`` to the pipe ``fd``, ``TimeoutError`` when the reader has not taken it by
    ``deadline`` (``fd`` is then made non-blocking: a blocking write of more than a page waits for all of
    it); ``OSError`` when the reader is gone."""
    if deadline is not None:
        os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        if not _wait(fd, True, deadline):
            raise TimeoutError("the chart's child takes no input")
        try:
            view = view[os.write(fd, view[:1 << 16]):]
        except BlockingIOError:
            continue


def _read_frame(fd: int, deadline: float | None = None) -> bytearray | None:
    head = _read_exact(fd, 8, deadline)
    return None if head is None else _read_exact(fd, struct.unpack("!Q", head)[0], deadline)


class ChartChild:
    """A child process that draws the timeline picture of one analysis (see the module's text). Use
    ``start()``, then ``send(a)`` and ``svg_utf8(a)``; ``close()`` ends it (a ``with`` block calls it)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._to = self._from = -1
        self._sent = False
        self.from_child = False  # whether svg_utf8() returned the child's picture

    def start(self) -> "ChartChild":
        """Start the child, which imports :mod:`reports.chart` and waits for its input. When it cannot
        be started (no interpreter to run, out of processes), nothing happens: the parent draws."""
        if self._proc is not None or not sys.executable:
            return self
        # the directory holding reports/ and forensics/, then where the parent finds matplotlib (a venv, a
        # PYTHONPATH that -I would drop); never the working directory ("")
        path = [str(Path(__file__).resolve().parent.parent), *(p for p in sys.path if p)]
        flags = ["-I"] + (["-B"] if sys.flags.dont_write_bytecode else [])
        try:
            self._proc = subprocess.Popen([sys.executable, *flags, "-c", _CHILD, *path], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        except (OSError, ValueError, subprocess.SubprocessError):
            return self
        self.pid, self._to, self._from = self._proc.pid, self._proc.stdin.fileno(), self._proc.stdout.fileno()
        return self

    def send(self, a: dict) -> None:
        """Hand the child :func:`chart_input` of ``a`` to draw (no-op without a child). A child that
        does not take it within :data:`WAIT_S` is ended (the parent then draws)."""
        if self._proc is None or self._sent:
            return
        self._sent = True
        try:
            deadline = time.monotonic() + WAIT_S
            for data in _frames(a):
                _write_within(self._to, struct.pack("!Q", len(data)), deadline)  # the frame, without a copy of data
                _write_within(self._to, data, deadline)
        except (OSError, TimeoutError):  # the child is gone or stuck: svg_utf8() draws in-process
            self.close()
        else:
            self._proc.stdin.close()
            self._to = -1

    def svg_utf8(self, a: dict) -> bytes | memoryview:
        """The pictures of ``a``, as :func:`reports.chart.figures` draws them, in UTF-8: the child's (not
        decoded: a busy node's picture is megabytes, written to the page as it came), or drawn here when
        there is no child or it gave none within :data:`WAIT_S` (its error, if any, is raised here as it
        would be without a child)."""
        self.send(a)
        answer = None
        if self._proc is not None:
            try:
                answer = _read_frame(self._from, time.monotonic() + WAIT_S)
            except (OSError, TimeoutError):
                answer = None
            self.close()
        if answer and answer[:1] == b"0":
            self.from_child = True
            return memoryview(answer)[1:]
        from .chart import figure_parts  # matplotlib is imported here only when the child gave no picture
        return b"".join(figure_parts(a))

    def close(self) -> None:
        """End the child (if it still runs) and reap it; idempotent."""
        proc, self._proc = self._proc, None
        self._to = self._from = -1
        self.pid = None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        proc.wait()

    def __enter__(self) -> "ChartChild":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _serve() -> int:
    """The child's work (``python -I -c`` :data:`_CHILD`): import the chart, read :func:`chart_input` from
    stdin (:func:`_read_input`), write ``b"0"`` + the SVG (UTF-8) framed to stdout; ``b"1"`` when
    drawing raised. Returns the exit code. Its stdout is kept for the answer alone (what a library
    prints goes to stderr's place). Ctrl-C (the terminal signals the whole process group) is the
    parent's to handle: the child ignores SIGINT and ends when the parent closes the pipe or kills it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.dup(1)
    os.dup2(2, 1)
    try:
        from .chart import figure_parts
    except Exception:
        figure_parts = None
    try:
        a = _read_input(0)
    except Exception:  # not what _frames sends: nothing to draw
        a = None
    if a is None:
        return 0
    try:
        if figure_parts is None:
            raise ImportError("reports.chart")
        parts, pictures = [b"0"], figure_parts(a)
        del a  # the pictures' generator holds the only reference
        for svg in pictures:  # each picture kept as UTF-8 only
            parts.append(svg)
            del svg
            gc.collect()  # the drawn figure's cycles, before the next is drawn in their place
    except Exception:
        parts = [b"1"]
    try:
        _write_within(out, struct.pack("!Q", sum(map(len, parts))))
        for part in parts:
            _write_within(out, part)
    except OSError:
        return 1
    return 0
