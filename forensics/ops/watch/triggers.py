"""How the watch agent learns of a daemon-reload the moment it happens: systemd's own D-Bus signal,
and PID 1's journal lines, each followed by a thread that blocks until something arrives (no polling).

D-Bus (the ``jeepney`` library, pure Python): systemd's ``org.freedesktop.systemd1.Manager`` emits
``Reloading(b active)``, true when a reload starts and false when it is done (org.freedesktop.systemd1(5),
"Signals"), to every client that called ``Subscribe()``. It is read on systemd's private socket
``/run/systemd/private`` (what systemctl itself uses; a peer-to-peer connection to PID 1, root only, so
every message on it is PID 1's; it needs no dbus-daemon, as in a node-in-a-box) and, where that cannot be
reached, on the system bus ``/run/dbus/system_bus_socket``, whose match rule names the sender
``org.freedesktop.systemd1``: the bus delivers only the name owner's signals, and each one's sender is
checked against ``GetNameOwner``, so a local user broadcasting a look-alike signal is not heard.

Journal: PID 1's reload lines in every wording the collector knows
(:func:`collectors.journal.wording.manager_line`: ``Reloading.``/``Reloading...``, the caller line of
v253+, ``Reexecuting.``, ``Received SIGHUP``, ``Reloading finished in N ms.``), taken only when
journald's trusted fields say PID 1 wrote them (:func:`collectors.journal.wording.pid1_trusted`, and
``_COMM=systemd``): a ``logger -t systemd`` line is never a trigger. Followed with ``sd_journal_wait``
(collectors/journal/sdjournal.py) or, where libsystemd cannot be loaded, ``journalctl -f -o export`` (journal-export-formats(7)).

Each source calls ``notify(kind, source, at)``: ``kind`` is ``reload-start``, ``reload-end`` (D-Bus) or
``journal-reload`` (PID 1's ``Reloading.``/``Reexecuting.`` line) or ``journal`` (its other reload lines),
``at`` unix seconds (a journal line's ``__REALTIME_TIMESTAMP``).
"""
from __future__ import annotations

import os
import selectors
import struct
import subprocess
import threading
import time
from typing import Callable

SYSTEMD_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
PRIVATE = "/run/systemd/private"
SYSTEM_BUS = "/run/dbus/system_bus_socket"
RETRY_S = 5.0
NUDGE_S, NUDGES = 0.1, 20  #: an unanswered call on the private socket is nudged this often (seconds, times)

Notify = Callable[[str, str, float], None]


class DbusReloads(threading.Thread):
    """A daemon thread that follows systemd's ``Reloading`` signal (module docstring); reconnects every
    :data:`RETRY_S` seconds while neither socket answers. ``connected`` names the live socket or is None."""

    def __init__(self, root: str, notify: Notify, log: Callable[[str], None]):
        super().__init__(name="watch-dbus", daemon=True)
        self.root, self.notify, self.log = root, notify, log
        self.connected: str | None = None
        self.first = None  #: what :meth:`connect` gave before the thread started

    def connect(self, quiet: bool = False):
        """``(socket, parser, owner, path)`` of the first socket that answers (the private one is tried
        twice), or None. The agent calls it once before its other threads start, then :meth:`start`."""
        for path, bus, tries in ((PRIVATE, False, 2), (SYSTEM_BUS, True, 1)):
            full = os.path.join(self.root, path.lstrip("/"))
            for _ in range(tries):
                try:
                    return (*_connect(full, bus), full)
                except (OSError, ValueError, TimeoutError, RuntimeError) as e:
                    if not quiet:
                        self.log(f"D-Bus: {full} not reachable ({type(e).__name__}: {e})")
        return None

    def run(self) -> None:
        quiet = False  # a socket that stays unreachable is said once, not every RETRY_S
        while True:
            got, self.first = self.first or self.connect(quiet), None
            if got is None:
                quiet = True
                time.sleep(RETRY_S)
                continue
            sock, parser, owner, full = got
            self.connected, quiet = full, False
            self.log(f"D-Bus: following systemd's Reloading signal on {full}")
            try:
                _follow(sock, parser, owner, self.notify, full)
            except (OSError, ValueError, RuntimeError) as e:
                self.log(f"D-Bus: {full} lost ({type(e).__name__}: {e})")
            finally:
                self.connected = None
                sock.close()
            time.sleep(RETRY_S)


def _connect(path: str, bus: bool):
    """``(socket, parser, owner)``: an authenticated socket to ``path`` that gets the ``Reloading`` signal
    (``Subscribe`` called), its jeepney parser, and on the system bus (after ``Hello`` and the ``AddMatch``
    rule) systemd's unique name, checked on every signal (None on the private socket: its peer is PID 1).
    Raises OSError, TimeoutError or RuntimeError (a D-Bus error reply)."""
    from jeepney import DBusAddress, MatchRule, message_bus, new_method_call
    from jeepney.io.blocking import prep_socket
    from jeepney.low_level import Parser
    sock = prep_socket(path, timeout=2.0)
    parser, serial = Parser(), iter(range(1, 1 << 31))
    systemd = DBusAddress(SYSTEMD_PATH, bus_name="org.freedesktop.systemd1", interface=MANAGER)
    ping = DBusAddress(SYSTEMD_PATH, bus_name="org.freedesktop.systemd1", interface="org.freedesktop.DBus.Peer")
    try:
        sock.settimeout(2.0 if bus else NUDGE_S)

        def call(addr, member, sig=None, body=()):
            n, nudges = next(serial), 0
            sock.sendall(new_method_call(addr, member, sig, body).serialise(serial=n))
            while True:
                msg = parser.get_next_message()
                if msg is None:
                    try:
                        data = sock.recv(65536)
                    except TimeoutError:
                        # seen in the lab: systemd's private socket left a first call that came in the same read
                        # as the handshake's BEGIN unanswered until more bytes came; a Peer.Ping is such bytes
                        nudges += 1
                        if bus or nudges > NUDGES:  # dbus-daemon answers; it would refuse a Ping before Hello
                            raise
                        sock.sendall(new_method_call(ping, "Ping").serialise(serial=next(serial)))
                        continue
                    if not data:
                        raise RuntimeError("connection closed")
                    parser.add_data(data)
                    continue
                if msg.header.fields.get(5) == n:  # REPLY_SERIAL
                    if msg.header.message_type.value == 3:  # ERROR
                        raise RuntimeError(f"{member}: {msg.body}")
                    return msg.body
        owner = None
        if bus:
            call(message_bus, "Hello")
            rule = MatchRule(type="signal", sender="org.freedesktop.systemd1", interface=MANAGER,
                             member="Reloading", path=SYSTEMD_PATH)
            call(message_bus, "AddMatch", "s", (rule.serialise(),))
            moved = MatchRule(type="signal", sender="org.freedesktop.DBus", interface="org.freedesktop.DBus",
                              member="NameOwnerChanged", path="/org/freedesktop/DBus")
            moved.add_arg_condition(0, "org.freedesktop.systemd1")
            call(message_bus, "AddMatch", "s", (moved.serialise(),))
            owner = call(message_bus, "GetNameOwner", "s", ("org.freedesktop.systemd1",))[0]
        call(systemd, "Subscribe")
        sock.settimeout(None)
        return sock, parser, owner
    except BaseException:
        sock.close()
        raise


def _follow(sock, parser, owner: str | None, notify: Notify, where: str) -> None:
    """Read signals until the connection ends (``parser`` holds what was read after the last reply);
    each ``Reloading(b)`` from systemd becomes a notify."""
    while True:
        msg = parser.get_next_message()
        if msg is None:
            data = sock.recv(65536)  # blocks: no timeout, no polling
            if not data:
                raise RuntimeError("connection closed by the peer")
            parser.add_data(data)
            continue
        h = msg.header
        if (owner is not None and h.message_type.value == 4 and h.fields.get(7) == "org.freedesktop.DBus"
                and h.fields.get(3) == "NameOwnerChanged" and msg.body[:1] == ("org.freedesktop.systemd1",)):
            owner = msg.body[2] or owner  # systemd re-executed and came back on the bus under a new unique name
            continue
        if h.message_type.value != 4 or h.fields.get(2) != MANAGER or h.fields.get(3) != "Reloading":
            continue  # 4: SIGNAL; header fields 2: INTERFACE, 3: MEMBER, 7: SENDER
        if owner is not None and h.fields.get(7) != owner:
            continue
        active = bool(msg.body[0]) if msg.body else False
        notify("reload-start" if active else "reload-end", where, time.time())


def pid1_reload_line(entry: dict) -> dict | None:
    """The :func:`collectors.journal.wording.manager_line` of a journal entry PID 1 wrote about a reload
    (kinds reload, reexec, caller, sighup, finished), or None (another line, or not trusted as PID 1's)."""
    from collectors.journal import wording as w
    if not w.pid1_trusted(entry) or w.text(entry.get("_COMM")) not in ("systemd", ""):
        return None
    line = w.manager_line(w.text(entry.get("MESSAGE")))
    return line if line and line["kind"] in ("reload", "reexec", "caller", "sighup", "finished") else None


class JournalReloads(threading.Thread):
    """A daemon thread that follows PID 1's journal entries from now on (module docstring). ``how`` says
    which way (``sd_journal_wait`` or ``journalctl -f``), once started."""

    def __init__(self, root: str, notify: Notify, log: Callable[[str], None]):
        super().__init__(name="watch-journal", daemon=True)
        self.root, self.notify, self.log = root, notify, log
        self.how: str | None = None

    def run(self) -> None:
        while True:
            try:
                try:
                    from collectors.journal.files import sdj
                    journal = sdj()
                except ImportError:
                    self._journalctl()
                else:
                    self._binding(journal)
            except Exception as e:  # noqa: BLE001 - the journal rotating or going away: start again
                self.log(f"journal: following stopped ({type(e).__name__}: {e}); again in {RETRY_S:.0f} s")
            self.how = None
            time.sleep(RETRY_S)

    def _entry(self, e: dict, at: float) -> None:
        line = pid1_reload_line(e)
        if line:  # main.c's line, once per reload, is the one counted (agent.Agent.notify)
            self.notify("journal-reload" if line["kind"] in ("reload", "reexec") else "journal", "journal", at)

    def _binding(self, journal) -> None:
        """sd_journal_get_fd(3): poll the journal's inotify descriptor (with the timeout libsystemd asks for
        when that descriptor is not reliable), then ``process()`` and read what was appended. The
        binding's own ``wait()`` is not used: called from a thread it stalled the agent's other threads."""
        live = os.path.realpath(self.root) == "/"
        j = journal.Reader(path=self.root, flags=journal.OS_ROOT) if not live else journal.Reader()
        sel = selectors.DefaultSelector()
        try:
            j.add_match("_PID=1")
            j.seek_tail()
            j.get_previous()
            sel.register(j.fileno(), selectors.EVENT_READ)
            self.how = "sd_journal_get_fd"
            self.log(f"journal: following PID 1's lines (sd_journal_get_fd + poll) under {self.root}")
            while True:
                sel.select(None if j.reliable_fd() else max(j.get_timeout_ms(), 0) / 1000 or None)
                if j.process() == journal.NOP:
                    continue
                for e in j:
                    at = e.get("__REALTIME_TIMESTAMP")
                    self._entry(e, at.timestamp() if hasattr(at, "timestamp") else time.time())
        finally:
            sel.close()
            j.close()

    def _journalctl(self) -> None:
        argv = ["journalctl", "-f", "-o", "export", "-n", "0", "--no-pager", "_PID=1"]
        if os.path.realpath(self.root) != "/":
            argv[1:1] = ["--root", self.root]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.how = "journalctl -f"
        self.log(f"journal: following PID 1's lines with {' '.join(argv)}")
        try:
            for e in export_entries(p.stdout):
                us = e.get("__REALTIME_TIMESTAMP")
                self._entry(e, int(us) / 1e6 if isinstance(us, str) and us.isdigit() else time.time())
        finally:
            p.kill()
            p.wait()


def export_entries(stream):
    """Entries of journal export format (journal-export-formats(7)) read from a binary ``stream``, as
    dicts of text fields: ``NAME=value`` lines, or ``NAME\\n`` + little-endian 64-bit size + bytes + ``\\n``
    for binary values (decoded as UTF-8, bad bytes replaced); a blank line ends an entry."""
    entry: dict = {}
    while True:
        line = stream.readline()
        if not line:
            return
        if line == b"\n":
            if entry:
                yield entry
            entry = {}
            continue
        line = line.rstrip(b"\n")
        if b"=" in line:
            k, _, v = line.partition(b"=")
        else:
            (size,) = struct.unpack("<Q", stream.read(8))
            k, v = line, stream.read(size)
            stream.read(1)
        entry.setdefault(k.decode("ascii", "replace"), v.decode("utf-8", "replace"))

