"""Who wrote a line that says it is sudo's (``SYSLOG_IDENTIFIER=sudo``): journald's trusted fields, read
from the writer's /proc when the line arrived, say sudo, say nobody (the writer had exited), or say someone else
(a forged line: a red flag, never the requester)."""
from __future__ import annotations

from .fields import text


#: what journald records as ``_EXE`` for sudo (the C sudo and sudo-rs, installed as sudo)
SUDO_EXES = ("sudo", "sudo-rs")


#: the fields journald reads about a line's writer from ``/proc/PID`` when the line arrives (journald-context.c
#: ``client_context_read_*``: comm, exe, cmdline, capabilities, cgroup and the unit, slice, session and owner
#: under it, audit session and login uid); a writer that has already exited leaves them all out, while ``_PID``,
#: ``_UID`` and ``_GID`` (the socket's SCM_CREDENTIALS) are still there
PROC_FIELDS = ("_COMM", "_EXE", "_CMDLINE", "_CAP_EFFECTIVE", "_SYSTEMD_CGROUP", "_SYSTEMD_UNIT", "_SYSTEMD_SLICE",
               "_SYSTEMD_SESSION", "_SYSTEMD_OWNER_UID", "_AUDIT_SESSION", "_AUDIT_LOGINUID")


def proc_unread(e: dict) -> bool:
    """True when entry ``e`` came from a process (``_PID`` recorded) of which journald recorded none of
    :data:`PROC_FIELDS`: it had exited (or could not be read) when journald looked, so who wrote the line can be
    neither confirmed nor refuted. A line with no writer process (the kernel's, ``/dev/kmsg``) is not this."""
    return text(e.get("_PID")).isdigit() and not any(text(e.get(f)) for f in PROC_FIELDS)


def sudo_unverified(e: dict) -> bool:
    """True for a line that says it is sudo's (``SYSLOG_IDENTIFIER=sudo``), came in as sudo's do (syslog(3):
    ``_TRANSPORT=syslog``) and whose writer cannot be verified (:func:`proc_unread`): neither sudo's
    (:func:`sudo_trusted`) nor a forged one (:func:`collectors.journal.wording.forged_claim`); never a requester's evidence."""
    return text(e.get("SYSLOG_IDENTIFIER")) == "sudo" and text(e.get("_TRANSPORT")) == "syslog" and proc_unread(e)


def sudo_verdict(e: dict) -> str | None:
    """The one verdict on a line that says it is sudo's (``SYSLOG_IDENTIFIER=sudo``): ``"sudo"`` when journald's
    trusted fields say sudo wrote it (:func:`sudo_trusted`), ``"unverified"`` when its writer cannot be checked
    (:func:`sudo_unverified`), else ``"forged"``; ``None`` for a line that does not say it is sudo's. Selection
    (the requester window), older bundles' ``forged`` rule and
    :func:`collectors.journal.wording.forged_claim` all read this."""
    if text(e.get("SYSLOG_IDENTIFIER")) != "sudo":
        return None
    return "sudo" if sudo_trusted(e) else "unverified" if sudo_unverified(e) else "forged"


def sudo_trusted(e: dict) -> bool:
    """True when journald's trusted fields say sudo wrote entry ``e``: ``_COMM=sudo``, ``_EXE`` (when recorded)
    naming sudo, and privilege: ``_UID=0`` or effective capabilities (``_CAP_EFFECTIVE``, from /proc/PID/status).
    sudo is set-uid root but logs with the invoking user's real uid, which is journald's ``_UID`` (the socket's
    SCM_CREDENTIALS: uid=1001 for sudo 1.9.13 run by uid 1001 on Debian 12, its CapEff full); ``logger -t sudo``
    or a user's own program named sudo has no capabilities. ``SYSLOG_IDENTIFIER=sudo`` alone never suffices."""
    exe, caps = text(e.get("_EXE")), text(e.get("_CAP_EFFECTIVE")) or "0"
    privileged = text(e.get("_UID")) == "0" or (not caps.strip("0123456789abcdefABCDEF") and int(caps, 16) > 0)
    return text(e.get("_COMM")) == "sudo" and privileged and (not exe or exe.rsplit("/", 1)[-1] in SUDO_EXES)
