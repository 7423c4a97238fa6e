"""The stored package logs' lines as events: one ``package.dpkg-action`` per dpkg.log line, one
``package.transaction`` per apt history.log stanza, one ``package.unattended-run`` per
unattended-upgrades run.

Each reader takes ``(path, rel, tz, units, problems)``: the stored file, its bundle path (for the
evidence), the node's zone (the logs are written in local time without a zone;
:func:`forensics.timeutil.localize`), the package names with systemd snippets (``None``: unknown)
and the list that collects line problems; it yields ``(event, end)``, ``end`` being when the
transaction or run ended (``None`` for a dpkg line). Line grammars live in
:mod:`collectors.packages.parse`. Nothing here touches the host.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from forensics.events import Event
from forensics.excerpt import cut, excerpt
from forensics.timeutil import iso_z, localize, within

import collectors.packages.parse as pp

RUN_GAP_S = 30 * 60         #: u-u lines further apart than this start a new run (translated logs)


def _ships(units: set[str] | None, package: str | None) -> bool | None:
    if units is None:
        return None
    return pp.package_name(package) in units if package else False


# -- dpkg.log --------------------------------------------------------------------------------------
#: dpkg.log actions that change what is installed (``packages_last_change``)
CHANGE_ACTIONS = ("install", "upgrade", "remove", "purge", "disappear")


def _dpkg_events(path, rel, tz, units, problems, changes: dict | None = None, near=None):
    """dpkg.log lines as :meth:`forensics.events.Event.deferred` events: the time and flags now, the
    summary, attrs, evidence and original made from the line's text only when read (:func:`_dpkg_fields`;
    most lines of a long-lived node's log are only counted). ``changes`` (package name -> UTC time),
    when given, gets the latest install, upgrade, removal or purge (:data:`CHANGE_ACTIONS`) of each package.
    ``near`` (a test of the line's ``YYYY-MM-DD HH:MM:SS`` text, :func:`near_windows`), when given, passes
    over the dated lines it refuses by that string alone: each is yielded as ``(None, its UTC time)``, no
    event made (issue 30), its change still taken."""
    bad = pp.LineProblems(rel, problems)
    ctx = (rel, units)
    for n, text in pp.read_lines(path, rel, problems):
        if near is not None and not near(text[:19]) and (when := pp.dpkg_stamp(text)) is not None:
            at = localize(when, tz)[0]
            if changes is not None and text[20:].split(" ", 1)[0] in CHANGE_ACTIONS:
                _changed(changes, pp.parse_dpkg_line(text), at)
            yield None, at
            continue
        p = pp.parse_dpkg_line(text)
        if p is None:
            bad.add(n, "no timestamp: " + text[:80] if text.strip() else "blank line")
            continue
        at, flags = localize(p.when, tz)
        if changes is not None:
            _changed(changes, p, at)
        yield Event.deferred(at, "dpkg", "package.dpkg-action", flags if p.parsed else flags + ("unparsed",),
                             _dpkg_fields, ctx, text, n), None
    bad.flush()


def _changed(changes: dict, p: pp.DpkgLine, at: datetime) -> None:
    if p.action in CHANGE_ACTIONS:
        name = pp.package_name(p.package)
        if name not in changes or at >= changes[name]:
            changes[name] = at


def near_windows(windows, reach) -> callable:
    """A test of a zone-less log line's ``YYYY-MM-DD HH:MM:SS`` text: true when it lies within ``reach``
    (a timedelta) of one of ``windows`` (UTC ``(start, end)`` pairs), compared as text with the bounds
    written in UTC (:func:`forensics.timeutil.within` over the texts); ``reach`` must hold any zone's offset
    besides what the rules look at (:data:`forensics.timeutil.WINDOW_REACH`). With no window, nothing is near."""
    fmt, bounds = "%Y-%m-%d %H:%M:%S", []
    for start, end in windows:
        try:
            lo, hi = (start - reach).strftime(fmt), (end + reach).strftime(fmt)
        except OverflowError:  # a window within two days of year 1 or 9999: every line is near
            return lambda _stamp: True
        if len(lo) != 19 or len(hi) != 19:  # before year 1000: the text would not sort as the time
            return lambda _stamp: True
        bounds.append((lo, hi))
    return within(bounds)


def _dpkg_fields(ctx: tuple, text: str, n: int) -> tuple[str, dict, dict, str]:
    """``(summary, attrs, evidence, original)`` of dpkg.log line ``n`` (``text``, a dated line) of the
    stored file ``ctx[0]``, ``ctx[1]`` the package names with systemd snippets (``None``: unknown)."""
    rel, units = ctx
    p = pp.parse_dpkg_line(text)
    named = p.action not in ("startup", "conffile", "unknown")
    attrs = {"action": p.action, "package": p.package, "old_version": p.old_version,
             "new_version": p.new_version, "state": p.state,
             "ships_units": _ships(units, p.package if named else None)}
    return _dpkg_summary(p, text), attrs, {"artifact": rel, "line": n}, p.time_text


def _dpkg_summary(p: pp.DpkgLine, text: str) -> str:
    if p.action == "startup":
        return f"dpkg startup {p.state}"
    if p.action == "status":
        return f"status {p.state} {p.package} {p.new_version or '<none>'}"
    if p.action == "conffile":
        return f"conffile {p.package} {p.state}"
    if p.action == "unknown":
        return f"unparsed dpkg.log line: {text[20:120]}"
    if p.old_version and p.new_version and p.old_version != p.new_version:
        return f"{p.action} {p.package} {p.old_version} → {p.new_version}"
    return f"{p.action} {p.package} {p.new_version or p.old_version or '<none>'}"


# -- apt history.log -------------------------------------------------------------------------------
@dataclass
class _Stanza:
    line: int
    when: datetime
    text: str
    end: datetime | None = None
    tags: dict = field(default_factory=dict)
    packages: list = field(default_factory=list)


def _apt_events(path, rel, tz, units, problems):
    bad = pp.LineProblems(rel, problems)
    cur, orphans_expected = None, False
    for n, text in pp.read_lines(path, rel, problems):
        if not text.strip():
            continue
        kv = pp.split_history_tag(text)
        if kv is None:
            bad.add(n, "not a 'Tag: value' line: " + text[:80])
            continue
        tag, value = kv
        if tag == "Start-Date":
            if cur:
                yield _transaction(cur, rel, tz, units)
            when = pp.parse_history_date(value)
            cur, orphans_expected = (_Stanza(n, when, value.strip()), False) if when else (None, True)
            if when is None:
                bad.add(n, f"Start-Date is not a date: {value[:40]!r}; stanza skipped")
        elif cur is None:
            if not orphans_expected:
                bad.add(n, f"{tag} line outside a Start-Date stanza")
        elif tag == "End-Date":
            cur.end = pp.parse_history_date(value)
            if cur.end is None:
                bad.add(n, f"End-Date is not a date: {value[:40]!r}")
            yield _transaction(cur, rel, tz, units, ended=True)
            cur = None
        elif tag in pp.HISTORY_PACKAGE_TAGS:
            pkgs, items = pp.parse_package_list(tag, value)
            cur.packages.extend(pkgs)
            for item in items[:3]:
                bad.add(n, f"unparsed {tag} item: {item[:80]!r}")
        else:
            cur.tags.setdefault(tag, value)
    if cur:
        yield _transaction(cur, rel, tz, units)
    bad.flush()


def _transaction(s: _Stanza, rel, tz, units, ended: bool = False):
    at, flags = localize(s.when, tz)
    end = None
    if s.end:
        end, end_flags = localize(s.end, tz)
        flags += tuple(f for f in end_flags if f not in flags)
    if not ended:
        flags += ("interrupted",)
    ships = None if units is None else sorted({p["name"] for p in s.packages if p["name"] in units})
    attrs = {"command": s.tags.get("Commandline"), "requested_by": s.tags.get("Requested-By"),
             "packages": s.packages, "end": iso_z(end), "error": s.tags.get("Error"), "ships_units": ships}
    cmd = attrs["command"]
    summary = f"apt transaction: {cut(cmd, 120) if cmd else 'no Commandline'}" \
              f" ({len(s.packages)} package{'' if len(s.packages) == 1 else 's'})"
    if "Comment" in s.tags:
        summary += f"; comment: {cut(s.tags['Comment'], 80)}"
    if attrs["error"]:
        summary += f"; Error: {excerpt(attrs['error'], 120)}"
    if not ended:
        summary += "; no End-Date (interrupted, or still running at collection)"
    return Event(at, "apt", "package.transaction", summary, attrs, {"artifact": rel, "line": s.line},
                 s.text, flags), end


# -- unattended-upgrades.log -----------------------------------------------------------------------
@dataclass
class _Run:
    line: int
    first: datetime
    text: str
    last: datetime
    openers: set = field(default_factory=set)
    packages: list | None = None  #: None until a "Packages that will be upgraded" line
    result: str | None = None


def _new_run(run: _Run, p: pp.UuLine, opener: str | None) -> bool:
    if opener is not None:  # each opening message is logged once per run
        return opener in run.openers
    # Translated logs have no recognisable opening message: a long silence is the only boundary
    # left, unless an install is under way (packages planned, no result yet).
    installing = bool(run.packages) and run.result is None
    return (p.when - run.last).total_seconds() > RUN_GAP_S and not installing


def _uu_events(path, rel, tz, units, problems):
    bad = pp.LineProblems(rel, problems)
    run = None
    for n, text in pp.read_lines(path, rel, problems):
        p = pp.parse_uu_line(text)
        if p is None:  # continuation of a multi-line message (traceback) belongs to the run
            if run is None and text.strip():
                bad.add(n, "no timestamp: " + text[:80])
            continue
        opener = pp.uu_opener(p.message)
        if run is not None and _new_run(run, p, opener):
            yield _run_event(run, rel, tz)
            run = None
        if run is None:
            run = _Run(n, p.when, p.time_text, p.when)
        if opener:
            run.openers.add(opener)
        run.last = max(run.last, p.when)
        planned = pp.uu_packages(p.message)
        if planned is not None:
            run.packages = (run.packages or []) + planned
        result = pp.uu_result(p.level, p.message)
        if result and run.result != "failed":
            run.result = result
    if run:
        yield _run_event(run, rel, tz)
    bad.flush()


def _run_event(run: _Run, rel, tz):
    at, flags = localize(run.first, tz)
    end, end_flags = localize(run.last, tz)
    flags += tuple(f for f in end_flags if f not in flags)
    packages = run.packages or []
    # Older u-u logs say "Packages that will be upgraded: " (empty) and stop when there is nothing to do.
    result = run.result or ("nothing-to-do" if run.packages == [] else None)
    attrs = {"end": iso_z(end), "packages": packages, "result": result}
    n = len(packages)
    summary = f"unattended-upgrades run: {n} package{'' if n == 1 else 's'} to upgrade" \
              f"{': ' + ' '.join(packages[:5]) + (' …' if n > 5 else '') if n else ''}" \
              f", result {result or 'not logged'}"
    return Event(at, "unattended-upgrades", "package.unattended-run", summary, attrs,
                 {"artifact": rel, "line": run.line}, run.text, flags), end
