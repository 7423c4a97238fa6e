"""Who asked for a daemon-reload: the caller line when systemd logged one, else the candidates the
timeline shows around that reload, ranked, each with its evidence.

systemd 253+ logs the caller (``Reloading requested from client PID 48211 ('systemctl') (unit
snapd.service)...``); systemd <= 252 (Debian 12, Ubuntu 22.04, RHEL 9) logs only ``Reloading.``, so the
requester is inferred (docs/sources.md "systemd: the manager reload message, by version").
Each reload gets its own candidates: a unit is one only when its run brackets that reload (PID 1 logged
its ``Starting``/``Started`` line at or before the reload, and its ``Deactivated``/``Stopped``/``Finished``/
``Failed`` line at or after it, or none yet); a point in time (a ``sudo ... systemctl`` line, a dpkg action,
an apt transaction) is one only before the reload and after the reload before it, so a line is never
credited to a reload it came after. Times are the journal's, in microseconds, and are worded in the real
order ("started 13 ms before the reload and stopped 0.24 s after it").
"""
from __future__ import annotations

from datetime import datetime, timedelta

from ..engines import SCOPE_PREFIXES
from ..events import Event
from ..timeutil import iso_z

#: how far before a reload without a caller line we look for what requested it
REQUESTER_LOOKBACK = timedelta(seconds=300)
#: and how far after it (the requester's own line can be logged just after PID 1's)
REQUESTER_LOOKAHEAD = timedelta(seconds=2)
#: dpkg actions that run maintainer scripts (and with them ``systemctl daemon-reload``)
SCRIPTED_ACTIONS = {"install", "upgrade", "configure", "remove", "purge", "trigproc"}
#: journal.unit actions (collectors/journal/wording.py) that begin a unit's run, and that end it
RUN_STARTS = ("starting", "started")
RUN_ENDS = ("stopped", "deactivated", "finished", "failed")
#: only a service or a scope runs processes (a slice, target, mount, socket or timer runs none itself)
RUNS_PROCESSES = (".service", ".scope")
#: reload event kinds: each is a reload of its own, with its own requester
RELOAD_KINDS = ("journal.reload", "journal.reexec")


def cite(e: Event) -> dict:
    """The evidence record for an event: where it is in the bundle, when, and what it says."""
    d = {"at": iso_z(e.at), "source": e.source, "kind": e.kind, "summary": e.summary}
    d.update(e.evidence)
    return d


def seconds(d: timedelta) -> str:
    """A duration for sentences: ``13 ms`` below 0.1 s, ``0.24 s`` below 1 s, ``1.2 s`` below 10 s, else
    whole seconds (``290 s``); a time within 50 ms of a whole second is worded as that second (``2 s``)."""
    s = abs(d.total_seconds())
    if s >= 10 or (s >= 1 and abs(s - round(s)) < 0.05):
        return f"{round(s)} s"
    if s >= 1:
        return f"{s:.1f} s"
    if s >= 0.1:
        return f"{s:.2f}".rstrip("0") + " s"
    return f"{round(s * 1000)} ms" if s >= 0.0005 else "under 1 ms"


def relative(at: datetime, reload_at: datetime, what: str = "the reload") -> str:
    """``1.2 s before the reload`` / ``0.24 s after the reload`` / ``at the reload``, from the real order."""
    if at == reload_at:
        return f"at the same microsecond as {what}"
    return f"{seconds(at - reload_at)} {'before' if at < reload_at else 'after'} {what}"


def unit_runs(events: list[Event]) -> list[tuple[str, Event | None, Event | None]]:
    """Every unit's runs in ``events`` (time order) from its ``journal.unit`` lines: ``(unit, start,
    end)``, ``start`` the first starting/started line of the run (``None``: the run began before the
    events), ``end`` its first stopped/deactivated/finished/failed line (``None``: not ended in them)."""
    runs: list = []
    open_: dict[str, Event] = {}
    for e in events:
        unit, action = e.attrs.get("unit"), e.attrs.get("action")
        if e.kind != "journal.unit" or not unit:
            continue
        if action in RUN_STARTS and unit not in open_:
            open_[unit] = e
        elif action in RUN_ENDS:
            runs.append((unit, open_.pop(unit, None), e))
    runs.extend((u, s, None) for u, s in open_.items())
    return runs


def requester(reload: Event, events: list[Event]) -> dict:
    """Who asked for ``reload`` (one of ``events``, the timeline around it in time order).

    Returns ``{"unit", "pid", "comm", "basis", "_evidence"}``: ``basis`` is ``caller-line`` when systemd
    logged the caller (or the SIGHUP's sender), ``inferred`` when the timeline gives candidates (then
    also ``inferred_from``, one phrase, and ``candidates``: every candidate, best first, each
    ``{"unit", "pid", "comm", "basis": "inferred", "why", "evidence": [...]}``, with ``package`` or
    ``command`` where they say more; the first is the requester), else ``unknown``. ``_evidence`` lists
    the cited events of the requester, for the cause's evidence (the caller pops it). Candidates, best
    first: a ``sudo`` line running ``systemctl``, a dpkg action that runs maintainer scripts, an apt
    transaction, an unattended-upgrades run, then the units whose run brackets the reload (the shorter
    the run, and for a scope still open the later its start, the better), then a requester unit's own
    lines, then the services that started before it and logged no stop, then sudo lines running ``systemctl``
    that cannot be verified (flag ``unverified``: the writer had exited before journald read its /proc). When
    only such services or lines are found, ``basis`` stays ``unknown`` and they are listed in ``candidates``.
    """
    a = reload.attrs
    if a.get("requester_pid") is not None:
        return {"unit": a.get("requester_unit"), "pid": a.get("requester_pid"), "comm": a.get("requester_comm"),
                "basis": "caller-line", "_evidence": []}
    others = [e.at for e in events if e.kind in RELOAD_KINDS and e is not reload]
    prev = max((t for t in others if t < reload.at), default=reload.at - REQUESTER_LOOKBACK)
    nxt = min((t for t in others if t > reload.at), default=None)
    lo = max(prev, reload.at - REQUESTER_LOOKBACK)
    # a point in time before this reload and after the previous one (a package run spans several reloads:
    # its lines look back the whole lookback), or a requester unit's own line just after it
    since_prev = [e for e in events if lo < e.at <= reload.at and e is not reload]
    before = [e for e in events if reload.at - REQUESTER_LOOKBACK <= e.at <= reload.at and e is not reload]
    after = [e for e in events if reload.at < e.at <= reload.at + REQUESTER_LOOKAHEAD and (nxt is None or e.at < nxt)]
    sighup = [e for e in since_prev + after if e.kind == "journal.sighup"]
    if sighup:
        s = sighup[-1]
        return {"unit": None, "pid": s.attrs.get("sender_pid"), "comm": s.attrs.get("sender_comm"),
                "basis": "caller-line", "_evidence": [cite(s)]}
    found = (_sudo_systemctl(since_prev, reload) + _dpkg_script(before, reload) + _apt_transaction(before, reload)
             + _unattended(before, reload) + _bracketing_units(events, reload) + _unit_lines(since_prev + after, reload))
    candidates, seen = [], set()
    for who, why, evs in found + _bracketing_units(events, reload, open_services=True) + _unverified_sudo(since_prev, reload):
        key = who.get("unit") or (who.get("comm"), who.get("package"), who.get("command"), who.get("pid"))
        if key in seen:
            continue
        seen.add(key)
        candidates.append({**who, "basis": "inferred", "why": why, "evidence": [cite(e) for e in evs]})
    if not found:  # none, or only services that started before it and run on: daemons, not a requester
        out = {"unit": None, "pid": None, "comm": None, "basis": "unknown", "_evidence": []}
        return {**out, "candidates": candidates} if candidates else out
    top = {k: v for k, v in candidates[0].items() if k not in ("why", "evidence")}
    return {**top, "inferred_from": candidates[0]["why"], "candidates": candidates,
            "_evidence": list(candidates[0]["evidence"])}


#: how long before a reload a person's ``sudo systemctl daemon-reload`` line may come (sudo logs before it runs)
TYPED_WITHIN = timedelta(seconds=5)


def typed_by_person(reload: Event, events: list[Event]) -> Event | None:
    """sudo's own line (journald's ``_COMM=sudo``, a forged one is ``journal.forged``) running ``systemctl
    daemon-reload`` or ``daemon-reexec`` up to :data:`TYPED_WITHIN` before ``reload`` with no package action
    between them, or ``None``: then a person asked for it, not a package's maintainer scripts. With a caller
    line naming a unit, sudo's line must come from that unit (the person's session scope)."""
    unit = reload.attrs.get("requester_unit")
    lo = reload.at - TYPED_WITHIN
    near = [e for e in events if lo <= e.at <= reload.at and e is not reload]
    if any(e.kind.startswith("package.") for e in near):
        return None
    return next((e for e in reversed(near) if e.kind == "journal.requester" and e.attrs.get("identifier") == "sudo"
                 and e.attrs.get("comm") == "sudo" and "systemctl" in (msg := e.attrs.get("message") or "")
                 and ("daemon-reload" in msg or "daemon-reexec" in msg)
                 and (not unit or e.attrs.get("unit") in (None, unit))), None)


def _point(e: Event, r: Event) -> str:
    return f"{e.summary} at {iso_z(e.at)}, {relative(e.at, r.at)}"


def _sudo_systemctl(near, r):
    # sudo's own line only: journald's _COMM (attrs "comm") is sudo, not just what the writer said
    # (SYSLOG_IDENTIFIER, attrs "identifier"); the journal reader makes a forged one journal.forged
    return [({"unit": e.attrs.get("unit"), "pid": e.attrs.get("pid"), "comm": "sudo"}, _point(e, r), [e])
            for e in reversed(near) if e.kind == "journal.requester" and e.attrs.get("identifier") == "sudo"
            and e.attrs.get("comm") == "sudo" and "systemctl" in (e.attrs.get("message") or "")]


def _unverified_sudo(near, r):
    # a line that says it is sudo's, its writer gone before journald read /proc: listed, never the requester
    # (its summary says so: collectors/journal/wording.py entry_events)
    return [({"unit": e.attrs.get("unit"), "pid": e.attrs.get("pid"), "comm": None}, _point(e, r), [e])
            for e in reversed(near) if e.kind == "journal.requester" and "unverified" in e.flags
            and "systemctl" in (e.attrs.get("message") or "")]


def _dpkg_script(near, r):
    return [({"unit": None, "pid": None, "comm": "dpkg", "package": e.attrs.get("package")}, _point(e, r), [e])
            for e in reversed(near) if e.kind == "package.dpkg-action" and e.attrs.get("action") in SCRIPTED_ACTIONS]


def _apt_transaction(near, r):
    return [({"unit": None, "pid": None, "comm": "apt", "command": e.attrs.get("command")}, _point(e, r), [e])
            for e in reversed(near) if e.kind == "package.transaction"]


def _unattended(near, r):
    return [({"unit": "apt-daily-upgrade.service", "pid": None, "comm": "unattended-upgrade"}, _point(e, r), [e])
            for e in reversed(near) if e.kind == "package.unattended-run"]


def _bracketing_units(events, r, open_services: bool = False):
    """The units whose run brackets ``r``, best first: finished runs by their length, then scopes (a
    session) still open by how late they started; with ``open_services``, only the services still
    running instead (a daemon that started before the reload and runs on: the weakest candidates, never
    the requester alone). Only services and scopes run processes; a container's scope
    (:data:`forensics.engines.SCOPE_PREFIXES`) is none: pods start around reloads all the time."""
    found = []
    for unit, start, end in unit_runs(events):
        if start is None or start.at > r.at or (end is not None and end.at < r.at) or not _may_ask(unit):
            continue
        if open_services != (end is None and unit.endswith(".service")):
            continue
        began = f"{unit} started {relative(start.at, r.at)}"
        if end is None:
            why = f"{began} and logged no stop in the window"
            rank = (1, r.at - start.at)
        else:
            why = f"{began} and {_ended(end)} {relative(end.at, r.at, 'it')}"
            rank = (0, end.at - start.at)
        found.append((rank, ({"unit": unit, "pid": None, "comm": None}, why, [start] + ([end] if end else []))))
    return [c for _, c in sorted(found, key=lambda x: x[0])]


def _may_ask(unit: str) -> bool:
    return unit.endswith(RUNS_PROCESSES) and not unit.startswith(SCOPE_PREFIXES)


def _ended(e: Event) -> str:
    return {"failed": "failed", "finished": "finished"}.get(e.attrs.get("action"), "stopped")


def _unit_lines(near, r):
    return [({"unit": e.attrs.get("unit"), "pid": e.attrs.get("pid"),
              "comm": e.attrs.get("comm") or e.attrs.get("identifier")}, _point(e, r), [e])
            for e in reversed(near) if e.kind == "journal.requester" and (e.attrs.get("unit") or e.attrs.get("identifier"))
            and (e.attrs.get("identifier") != "sudo" or e.attrs.get("comm") == "sudo")]


def describe_requester(req: dict | None, others: bool = True) -> str:
    """One clause for the report: 'requested by snapd.service (PID 48211, systemctl)', or for an inferred
    requester 'requested by X (inferred: why)', naming the other candidates when there are some (and
    ``others``)."""
    rest = (req or {}).get("candidates") or []
    if not req or req.get("basis") == "unknown":
        if not rest:
            return "what requested it is unknown (systemd logged no caller and nothing ran just before)"
        return ("what requested it is unknown (systemd logged no caller, no unit ran just for it and no line that "
                f"asked for it can be verified); around it: {_listed(rest)}" if others else "what requested it is unknown")
    name = _name(req)
    detail = ", ".join(x for x in [f"PID {req['pid']}" if req.get("pid") else "", req.get("comm") or ""] if x)
    text = f"requested by {name}" + (f" ({detail})" if detail and req.get("unit") else "")
    if req.get("basis") == "inferred":
        text += f" (inferred: {req.get('inferred_from')})"
        if others and rest[1:]:
            text += f"; other candidates: {_listed(rest[1:])}"
    return text


def _listed(cands: list[dict], most: int = 3) -> str:
    return "; ".join(c["why"] for c in cands[:most]) + (f" and {len(cands) - most} more" if len(cands) > most else "")


def _name(req: dict) -> str:
    return req.get("unit") or req.get("package") and f"dpkg ({req['package']})" or req.get("comm") or "unknown"
