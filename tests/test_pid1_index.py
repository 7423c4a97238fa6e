"""PID 1's lines through journald's index (issue 30): :func:`collectors.journal.selection.pid1_passes` walks
every ``_PID=1`` entry reading MESSAGE alone, the ``_PID=1`` entries of the units that matter, and the few
entries that claim PID 1 by value (``PID1_CLAIMS``), instead of reading four fields of every line of
``PID1``. They must keep what the one walk kept: the same entries under the same rules (``pid1``, ``unit``,
``forged``), red flags included. The journal is a real .journal file (systemd-journal-remote) holding every
kind of line the rule tells apart: PID 1's manager and unit lines on each transport, with and without a
UNIT that matters, early-boot ``systemd[1]:`` lines read from /dev/kmsg, and ``logger -t systemd``
look-alikes with and without ``SYSLOG_PID=1``; read by both sources (libsystemd file by file, and the node's
journalctl), with one file and with the lines spread over two.
"""
from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from journalbuild import build_journal
from test_journal import T0, entry, pid1

from collectors.journal import journalctl, selection
from collectors.journal.fileset import _FileSet
from collectors.journal.reader import _ReaderSource
from collectors.journal.wording import PID1

S = timedelta(seconds=1)


def _lines() -> list[bytes]:
    t = iter(range(1000))
    at = (lambda: T0 + next(t) * S)
    out = []
    for transport in ("journal", "syslog", "stdout", "driver"):
        tr = {"_TRANSPORT": transport}
        out += [pid1(at(), "Reloading.", **tr),
                pid1(at(), "Reloading requested from client PID 48211 ('systemctl') (unit snapd.service)...",
                     func="log_caller", **tr),
                pid1(at(), "Started kubelet.service - kubelet.", UNIT="kubelet.service", **tr),
                pid1(at(), "Stopped session-4.scope.", UNIT="session-4.scope", **tr),
                pid1(at(), "Started nvidia-persistenced.service.", UNIT="nvidia-persistenced.service", **tr),
                pid1(at(), "kubelet.service: Consumed 1.2s CPU time.", UNIT="kubelet.service", **tr),
                pid1(at(), "Mounted /run/credentials.", **tr)]
    # early boot, through /dev/kmsg: no _PID, SYSLOG_PID=1
    out += [_kmsg(at(), "systemd 252.39-1~deb12u1 running in system mode (+PAM +AUDIT)"),
            _kmsg(at(), "Started containerd.service - containerd container runtime.", UNIT="containerd.service"),
            _kmsg(at(), "Reloading.")]
    # look-alikes: logger -t systemd (--id=1 or not), systemd-cat -t systemd, a user manager
    for fields in ({"_TRANSPORT": "syslog", "SYSLOG_PID": 1, "_COMM": "logger"},
                   {"_TRANSPORT": "syslog", "_COMM": "logger"},
                   {"_TRANSPORT": "journal", "SYSLOG_PID": 1, "_COMM": "cat"},
                   {"_TRANSPORT": "journal", "_COMM": "systemd"}):
        out += [entry(at(), 31337, "systemd", "Reloading.", **fields),
                entry(at(), 31337, "systemd", "Started kubelet.service.", UNIT="kubelet.service", **fields),
                entry(at(), 31337, "systemd", "Started evil.service.", UNIT="evil.service", **fields)]
    return out


def _kmsg(at, message, **fields) -> bytes:
    """An early-boot ``systemd[1]:`` line as journald reads it from /dev/kmsg: no ``_PID``, ``SYSLOG_PID=1``."""
    return _no_pid(entry(at, 0, "systemd", message, _TRANSPORT="kernel", SYSLOG_PID=1, **fields))


def _no_pid(export: bytes) -> bytes:
    return b"".join(line + b"\n" for line in export.split(b"\n")[:-1] if not line.startswith(b"_PID=")) + b"\n"


def _one_walk(src) -> list[tuple[str, str]]:
    out = []
    for e in src.scan(PID1):
        r = selection.pid1_rule(e)
        if r:
            out.append((src.cursor(), r))
    return out


def _by_index(src) -> list[tuple[str, str]]:
    spool = selection.Spool()
    trig = selection._pid1_pass(src, None, [], lambda rule, e=None: spool.keep(
        rule, e["__CURSOR"] if e else src.cursor(), e or src.full))
    kept = [(e["__CURSOR"], r) for e in spool.entries() for r in e["_GF_SELECTED_BY"]]
    return kept, trig


def _keyed(kept):
    return sorted((selection.Spool._key(c), r) for c, r in kept)


@pytest.mark.parametrize("split", [1, 2])
def test_the_index_passes_keep_what_one_walk_over_every_claim_kept(tmp_path, split):
    lines = _lines()
    paths = [build_journal(b"".join(lines[i::split]), tmp_path / f"j{i}/system.journal") for i in range(split)]
    handles = [open(p, "rb") for p in paths]
    try:
        fds = [h.fileno() for h in handles]
        want = [k for fd in fds for k in _one_walk(_ReaderSource([fd]))]
        for src in (_ReaderSource(fds), _FileSet(fds, None, str(tmp_path)),
                    journalctl._JournalctlSource([shutil.which("journalctl")], [str(p) for p in paths])):
            got, triggers = _by_index(src)
            assert _keyed(got) == _keyed(want), type(src).__name__
    finally:
        for h in handles:
            h.close()
    rules = sorted(r for _, r in want)
    # journal/driver: 2 manager lines + 2 units that matter each; syslog/stdout: every manager line and unit
    # action forged (5 each); kmsg: banner, containerd, Reloading. (3); look-alikes with SYSLOG_PID=1: 3 each
    assert rules.count("pid1") == 2 * 2 + 2 and rules.count("unit") == 2 * 2 + 1
    assert rules.count("forged") == 2 * 5 + 2 * 3
    # the reloads around which requesters are looked for: PID 1's own (journal, driver, kmsg), never a look-alike
    assert len(triggers) == 2 * 2 + 1


def test_a_journal_without_pid1_lines_needs_no_unit_pass(tmp_path):
    p = build_journal(entry(T0, 4242, "kubelet", "I1202 ok", _COMM="kubelet"), tmp_path / "j/system.journal")
    with open(p, "rb") as h:
        src = _ReaderSource([h.fileno()])
        assert [w for w, _, _ in selection.pid1_passes(src)] == ["PID 1 lines", "lines that claim PID 1"]
        assert _by_index(src) == ([], [])
