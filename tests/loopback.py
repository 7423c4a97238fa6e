"""A loopback TCP server that speaks raw bytes, for tests of hostile peers: an answer that trickles,
never ends, redirects, or a server that reads a byte at a time. ``talk(server, conn)`` runs in a thread
per connection (the socket closed after it; an ``OSError`` from it ends that connection quietly);
``stop`` is set once :meth:`RawServer.close` is called, which talks that loop should watch."""
from __future__ import annotations

import socket
import threading


class RawServer:
    """Listening on 127.0.0.1 (``url``: ``http://127.0.0.1:PORT``) until :meth:`close`; ``seen`` and
    ``bytes_sent`` are for the talks to fill."""

    def __init__(self, talk):
        self.talk, self.stop, self.seen, self.bytes_sent = talk, threading.Event(), [], [0]
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        conn.settimeout(10)
        try:
            self.talk(self, conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


def request_line(conn) -> tuple[str, str | None]:
    """Read a request's head from ``conn`` (one recv: a test client's request is small): ``(path, the
    Authorization header or None)``."""
    head = conn.recv(65536).decode("latin-1")
    auth = next((x.split(":", 1)[1].strip() for x in head.split("\r\n") if x.lower().startswith("authorization:")), None)
    return head.split(" ", 2)[1], auth
