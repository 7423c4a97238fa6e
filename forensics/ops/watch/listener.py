"""The agent's HTTP listener (``--listen``): ``/metrics`` and ``/healthz``, bounded against any client that can
reach it (the DaemonSet listens on the pod network: every pod can).

One thread and one selector, never a thread per connection (issue 27: 1,000 idle connections that sent half
a request held 1,005 threads, and once descriptors ran out ``accept()`` spun on EMFILE):

- a request head (request line and headers, RFC 9112 section 2.1; a body is never read) must arrive within
  :data:`READ_S` seconds of the accept and in at most :data:`MAX_REQUEST` bytes, else the connection is
  answered 408 or 431 and closed; the answer must be taken by the client within :data:`WRITE_S`;
- at most :data:`MAX_CONNECTIONS` connections are open at once and :data:`MAX_PER_PEER` from one address: a
  connection beyond either cap closes at once the oldest one still sending its request (from that address
  first), so that a flood from one pod never locks out the kubelet's probe or Prometheus;
- ``accept()`` failing for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) closes the oldest
  waiting connection and stops accepting for :data:`BACKOFF_S` (the listening socket stays readable: taken
  again at once, it would spin), said in the log at most once a minute;
- only ``GET`` and ``HEAD`` (405 otherwise), every answer ends its connection (``Connection: close``).

The sweep loop runs in its own thread and never waits on this one; a route's handler only reads what the loop
published (the metrics registry, the loop's last progress).
"""
from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from typing import Callable

READ_S = 5.0            #: seconds from the accept for the whole request head to arrive
WRITE_S = 10.0          #: seconds for the client to take the answer
MAX_REQUEST = 8192      #: bytes of request head taken
MAX_CONNECTIONS = 64    #: connections open at once
MAX_PER_PEER = 8        #: connections open at once from one address
BACKOFF_S = 0.5         #: no accept() for this long after it failed for lack of descriptors or memory
BACKLOG = 128
LOG_EVERY_S = 60.0      #: the listener's own trouble is said at most this often
SCARCE = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}

#: a route: no argument, returns ``(status, content type, body)``
Handler = Callable[[], "tuple[int, str, bytes]"]


class _Conn:
    __slots__ = ("sock", "peer", "deadline", "inbuf", "out")

    def __init__(self, sock: socket.socket, peer: str, now: float):
        self.sock, self.peer, self.deadline = sock, peer, now + READ_S
        self.inbuf = bytearray()
        self.out: memoryview | None = None  # the answer still to send, once there is one


class Listener(threading.Thread):
    """Serve ``routes`` (``{path: handler}``) on ``host:port`` until :meth:`close`. The socket is bound in the
    constructor (``OSError`` when it cannot be: address in use, bad host), served once :meth:`start` ed.
    ``log`` takes one line per event worth saying (at most one a minute for a flood)."""

    def __init__(self, host: str, port: int, routes: dict[str, Handler], log: Callable[[str], None]):
        super().__init__(name="watch-listener", daemon=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self.sock.setblocking(False)
        self.routes, self.log = routes, log
        self.conns: dict[int, _Conn] = {}  # by descriptor, oldest first
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.paused_until = 0.0
        self.said = {}  # what -> [monotonic time last said, times since]
        self.closing = False

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the kernel's choice for 0)."""
        return self.sock.getsockname()[1]

    def close(self) -> None:
        """Stop serving (within a second) and close every socket."""
        self.closing = True

    def run(self) -> None:
        try:
            while not self.closing:
                self._round()
        finally:
            for c in list(self.conns.values()):
                self._drop(c)
            self.sel.close()
            self.sock.close()

    def _round(self) -> None:
        """One wait on the selector and what came: connections answered first, then new ones accepted."""
        now = time.monotonic()
        wake = min([c.deadline for c in self.conns.values()] + [now + 1.0])
        if self.paused_until:
            wake = min(wake, self.paused_until)
        events = self.sel.select(max(wake - now, 0.0))
        accept = False
        for key, mask in events:
            if key.fileobj is self.sock:
                accept = True
            elif key.fd in self.conns:
                c = self.conns[key.fd]
                self._send(c) if c.out is not None else self._receive(c)
        now = time.monotonic()
        for c in [c for c in self.conns.values() if c.deadline <= now]:
            if c.out is None:
                self._answer(c, 408, "text/plain", b"request not complete in time\n")
            else:
                self._drop(c)  # the client did not take its answer
        if self.paused_until and now >= self.paused_until:
            self.paused_until = 0.0
            self.sel.register(self.sock, selectors.EVENT_READ)
        elif accept:
            self._accept(now)

    def _accept(self, now: float) -> None:
        """Accept what is waiting (at most :data:`MAX_PER_PEER` a round, so that requests already in are read
        before a flood's newer connections push them out)."""
        for _ in range(MAX_PER_PEER):
            try:
                s, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in SCARCE:
                    self._pause(e)
                    return
                self._say("accept", f"listener: accept failed ({e})")  # ECONNABORTED and the like: the next one
                continue
            s.setblocking(False)
            peer = addr[0]
            self._make_room(peer)
            c = self.conns[s.fileno()] = _Conn(s, peer, now)
            self.sel.register(s, selectors.EVENT_READ)
            self._receive(c)  # what came with the handshake's last packet

    def _make_room(self, peer: str) -> None:
        """Close the oldest connection still sending its request when ``peer`` holds :data:`MAX_PER_PEER` or
        all hold :data:`MAX_CONNECTIONS` (oldest answered ones when none is still sending)."""
        for cap, whose in ((MAX_PER_PEER, f"from {peer}"), (MAX_CONNECTIONS, "in all")):
            pool = [c for c in self.conns.values() if cap == MAX_CONNECTIONS or c.peer == peer]
            while len(pool) >= cap:
                victim = next((c for c in pool if c.out is None), pool[0])
                pool.remove(victim)
                self._drop(victim)
                self._say(f"cap-{cap}", f"listener: {cap} connections {whose}; the oldest waiting one closed")

    def _pause(self, e: OSError) -> None:
        """accept() failed for lack of descriptors or memory: free one, and stop accepting for a while."""
        self.sel.unregister(self.sock)
        self.paused_until = time.monotonic() + BACKOFF_S
        waiting = [c for c in self.conns.values() if c.out is None]
        if waiting:
            self._drop(waiting[0])
        self._say("scarce", f"listener: accept failed ({errno.errorcode.get(e.errno, e.errno)}: {e.strerror}); "
                            f"not accepting for {BACKOFF_S:g} s at a time")

    def _say(self, what: str, line: str) -> None:
        now = time.monotonic()
        last = self.said.setdefault(what, [-LOG_EVERY_S, 0])
        last[1] += 1
        if now - last[0] >= LOG_EVERY_S:
            self.log(line + (f" (x{last[1]} in the last minute)" if last[1] > 1 else ""))
            last[0], last[1] = now, 0

    def _drop(self, c: _Conn) -> None:
        self.conns.pop(c.sock.fileno(), None)
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()

    def _receive(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(MAX_REQUEST + 1 - len(c.inbuf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            return self._drop(c)
        c.inbuf += data
        end = c.inbuf.find(b"\r\n\r\n")
        end = end if end >= 0 else c.inbuf.find(b"\n\n")
        if end >= 0:
            self._answer(c, *self._route(bytes(c.inbuf[:end])))
        elif len(c.inbuf) > MAX_REQUEST:
            self._answer(c, 431, "text/plain", f"request head over {MAX_REQUEST} bytes\n".encode())

    def _route(self, head: bytes) -> tuple[int, str, bytes, bool]:
        """``(status, content type, body, head only)`` for a request head."""
        parts = head.split(b"\n", 1)[0].rstrip(b"\r").split(b" ")
        if len(parts) != 3 or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1") or not parts[1].startswith(b"/"):
            return 400, "text/plain", b"bad request line\n", False
        method, path = parts[0], parts[1].split(b"?", 1)[0].decode("latin-1")
        if method not in (b"GET", b"HEAD"):
            return 405, "text/plain", b"GET or HEAD only\n", False
        handler = self.routes.get(path)
        if handler is None:
            return 404, "text/plain", ("not found; try " + " ".join(sorted(self.routes)) + "\n").encode(), False
        try:
            return (*handler(), method == b"HEAD")
        except Exception as e:  # noqa: BLE001 - one answer lost, never the listener
            self._say("handler", f"listener: {path} failed: {type(e).__name__}: {e}")
            return 500, "text/plain", b"internal error\n", False

    def _answer(self, c: _Conn, status: int, ctype: str, body: bytes, head_only: bool = False) -> None:
        head = (f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n"
                + ("Allow: GET, HEAD\r\n" if status == 405 else "") + "\r\n").encode("latin-1")
        c.out = memoryview(head + (b"" if head_only else body))
        c.deadline = time.monotonic() + WRITE_S
        self.sel.modify(c.sock, selectors.EVENT_WRITE)
        self._send(c)

    def _send(self, c: _Conn) -> None:
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self._drop(c)
        c.out = c.out[n:]
        if not c.out:
            try:
                c.sock.shutdown(socket.SHUT_WR)  # the answer's end, before the close
            except OSError:
                pass
            self._drop(c)
