"""A package transaction (an apt stanza, a dpkg action, an unattended-upgrades run) inside the window.

A transaction takes a running pod's GPU in two ways: its maintainer scripts run ``systemctl
daemon-reload`` (then the reload's mechanism decides, :mod:`.reload`), or it installs new NVIDIA
user-space libraries while the old kernel module stays loaded (then the symptom is the version mismatch,
:mod:`.mismatch`). A transaction that did neither, as the journal shows, took nothing.
"""
from __future__ import annotations

from ...events import Event
from ...timeutil import ZONE_UNCERTAINTY, ZONE_UNKNOWN_NOTE, iso_z
from ..broken import UNTRUSTED
from ..requester import RELOAD_KINDS, typed_by_person
from ..verdicts import (Cause, Evidence, Happened, Mechanism, Rule, Window, cite, covers, explains, gap_sentence,
                        weigh)
from .reload import judge as reload_judge, mechanism as reload_mechanism
from .mismatch import driver_packages

KIND = "package-transaction"
TITLE = "a package transaction"
EXPLAINS = frozenset({"nvml-unknown", "version-mismatch", "no-driver", "create-failed", "device-unhealthy",
                      "unknown"})
KINDS = ("package.transaction", "package.dpkg-action", "package.unattended-run")


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: dpkg.log, apt history.log or the unattended-upgrades log shows one inside the window (a
    dpkg ``startup`` line alone is none), its time read in the node's known zone, and it could have done
    this (its maintainer scripts' reload could revoke the incident's GPU, or it changed NVIDIA driver
    packages); inferred: one lies within ±14 h of the window while the node's zone is unknown (never
    confirmed on time alone); excluded: the package logs cover the window and show none, or the journal
    covers it and shows no reload after it while it changed no NVIDIA driver package; undetermined: no
    package log covers the window."""
    hits, loose = _hits(window, ev)
    h = happened(window, ev, hits, loose)
    return weigh(KIND, h, mechanism(window, ev, h, hits + loose))


def _hits(window: Window, ev: Evidence) -> tuple[list[Event], list[Event]]:
    start, end = window
    pad = ZONE_UNCERTAINTY
    near = [e for e in ev.events if e.kind in KINDS and start - pad <= e.at <= end + pad
            and not (e.kind == "package.dpkg-action" and e.attrs.get("action") == "startup")]
    return ([e for e in near if "tz-unknown" not in e.flags and start <= e.at <= end],
            [e for e in near if "tz-unknown" in e.flags])


def happened(window: Window, ev: Evidence, hits: list[Event], loose: list[Event]) -> Happened:
    """The package log lines inside the window (``hits``), or within ±14 h of it when their zone is unknown
    (``loose``): :func:`_hits`'s pair."""
    start, end = window
    cov = ev.coverage
    names = [n for n in ("dpkg", "apt", "unattended-upgrades") if n in cov]
    gaps = [g for n in names if (g := gap_sentence(n, cov.get(n), start, end))]
    gaps += sorted({c.uncertain for n in names if (c := cov.get(n)) and c.uncertain})
    if hits:
        first = hits[0]
        return Happened("yes", f"{len(hits)} package log entries fall inside the window, the first at "
                        f"{iso_z(first.at)}: {first.summary}.{_ships(hits)}", at=first.at,
                        evidence=[cite(e) for e in hits[:20]], gaps=gaps)
    if loose:
        first = loose[0]
        return Happened("possibly", f"{len(loose)} package log entries lie within ±14 h of the window, the first read "
                        f"as {iso_z(first.at)}: {first.summary}. The node's time zone is unknown, so these zone-less "
                        f"times may fall inside the window or not; nothing else dates them.{_ships(loose)}",
                        at=first.at, evidence=[cite(e) for e in loose[:20]], gaps=gaps or [ZONE_UNKNOWN_NOTE])
    covering = [n for n in ("dpkg", "apt") if covers(cov.get(n), start, end)]
    if covering and not any(cov[n].uncertain for n in covering):
        spans = "; ".join(f"{n} from {iso_z(cov[n].start)}" for n in covering)
        return Happened("no", f"Package history covers the whole window ({spans}) and records no install, upgrade "
                        "or removal inside it.", gaps=gaps)
    if covering:
        return Happened("unknown", "Package history records no install, upgrade or removal within ±14 h of the "
                        "window, but its times carry no zone and the node's time zone is unknown, so it cannot rule "
                        "one out.", gaps=gaps)
    return Happened("unknown", "No package log covers the window, so a transaction inside it can be neither shown "
                    "nor ruled out.", gaps=gaps or ["no dpkg or apt history in the bundle"])


#: the symptoms new NVIDIA driver packages produce (new libraries beside the loaded module, a module gone)
DRIVER_SYMPTOMS = ("version-mismatch", "no-driver", "create-failed", "unknown")


def mechanism(window: Window, ev: Evidence, h: Happened, near: list[Event]) -> Mechanism:
    """A transaction acts in two ways only: through the NVIDIA driver packages its lines ``near`` the window
    changed (for a symptom such a change produces), or through a daemon-reload its maintainer scripts ran. So
    the reload path is closed when the reload rule excludes the reload for this incident (its reason is
    quoted), or when every reload in the window was typed by a person (sudo's ``systemctl daemon-reload``
    line), or when the journal covers the window and PID 1 logged none; with both paths closed it is ruled out."""
    if (no := explains(EXPLAINS, ev.scope, TITLE)) is not None:
        return no
    drivers = driver_packages(near)
    if drivers and ev.scope.symptom in DRIVER_SYMPTOMS:
        return Mechanism("shown", f"It changed NVIDIA driver packages ({', '.join(drivers[:5])}): new user-space "
                         "libraries beside the loaded kernel module break NVML until the module is reloaded.")
    changed = (f"It changed NVIDIA driver packages ({', '.join(drivers[:3])}), which do not produce this symptom"
               if drivers else "It changed no NVIDIA driver package")
    start, end = window
    reloads = [e for e in ev.events if e.kind in RELOAD_KINDS and start <= e.at <= end
               and not UNTRUSTED & set(e.flags)]
    via = reload_judge(window, ev)
    if via.verdict == "excluded":
        said = via.reason.split(" It could not have caused this incident, though: ")[-1]
        return Mechanism("ruled-out", f"{changed}, and its maintainer scripts act only through a daemon-reload, which "
                         f"is excluded here: {said}")
    typed = [t for r in reloads if (t := typed_by_person(r, ev.events))]
    if reloads and len(typed) == len(reloads):
        return Mechanism("ruled-out", f"{changed}, and the daemon-reload in the window was typed by a person "
                         f"({typed[0].summary} at {iso_z(typed[0].at)}), not run by its maintainer scripts.")
    if h.state == "yes" and not reloads and covers(ev.coverage.get("journal"), start, end):
        return Mechanism("ruled-out", "The journal covers the window and PID 1 logged no daemon-reload in it, so its "
                         f"maintainer scripts reloaded nothing; {changed[:1].lower()}{changed[1:]}.")
    m = reload_mechanism(ev)
    if reloads:
        return Mechanism(m.state, f"PID 1 logged a daemon-reload in the window (the reload is weighed as its own "
                         f"cause). {m.said}", contradictions=m.contradictions)
    return Mechanism("fits", "Its maintainer scripts may have run a daemon-reload that no covering journal shows.")


def _ships(hits: list[Event]) -> str:
    """The sentence naming the packages with systemd units among ``hits``, or ``""``."""
    units = sorted({p for e in hits for p in (e.attrs.get("ships_units") if isinstance(e.attrs.get("ships_units"), list)
                                              else ([e.attrs.get("package")] if e.attrs.get("ships_units") else []))})
    return (f" Packages with systemd units changed ({', '.join(units[:5])}); their maintainer scripts run "
            "`systemctl daemon-reload`.") if units else ""


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Hold the packages whose maintainer scripts broke running pods until the node is fixed."""
    return {"what": "Find which package's scripts acted (the evidence lines), and hold such upgrades on GPU nodes "
                    "until the GPU is injected through the OCI spec (CDI) or the driver is upgraded with a drain",
            "commands": ["apt-mark showhold", "grep -E ' (install|upgrade) ' /var/log/dpkg.log | tail -n 20"],
            "why": "Unattended upgrades run maintainer scripts (daemon-reload) and replace driver libraries under "
                   "running pods.", "sources": ["https://github.com/NVIDIA/nvidia-container-toolkit/issues/1227"]}


RULE = Rule(KIND, TITLE, EXPLAINS, ("dpkg", "apt", "unattended-upgrades", "journal"), judge, remedy, severity="config")
