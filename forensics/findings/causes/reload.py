"""A systemd ``daemon-reload`` (or ``daemon-reexec``, or SIGHUP to PID 1) inside the window.

The mechanism (docs/sources.md "OCI runtime spec and the NVIDIA modes", "cgroup device state", "The systemd lab";
"Cases" C01, C05): under the systemd cgroup driver a reload re-applies each container scope's ``DeviceAllow=``,
which runc built from the OCI spec; a GPU the legacy ``nvidia-container-runtime-hook`` (or a device plugin's
envvar strategy) added outside the spec is not among them and is revoked, and so is a spec GPU whose ``/dev/char``
link runc skipped. ``daemon-reexec`` does the same: measured in the project's systemd lab (docs/sources.md "The
systemd lab": systemd 252, cgroup v1, the hook container's ``open(/dev/nvidiactl)`` turns from ENXIO to EPERM
exactly as after a reload), so both count.

Happened: PID 1's own line, by journald's trusted fields (collectors/journal), inside the window; a
forged line is a red flag, never here. Could it do this here: judged from the exposure rows of the
incident's pods (:func:`forensics.findings.scope.rows`): shown when one of them is hook-injected (or
caught by the /dev/char trap) under the systemd driver as its own evidence or its engine's config shows;
ruled out when every one of them keeps its GPU across a reload as the node shows (devices in the spec, or
the cgroupfs driver read from the engine's config or the container); fits when that is unknown (a config
not read, a driver only assumed from a default, pods the node no longer holds).
"""
from __future__ import annotations

from ...timeutil import human, iso_z
from .. import scope as S
from ..broken import UNTRUSTED
from ..requester import RELOAD_KINDS, REQUESTER_LOOKBACK, describe_requester, requester
from ..verdicts import (Cause, Evidence, Happened, Mechanism, Rule, Window, cite, coverage_of, explains,
                        gap_sentence, weigh)
from .commands import recreate

KIND = "daemon-reload"
TITLE = "a systemd daemon-reload"
EXPLAINS = frozenset({"nvml-unknown", "device-unhealthy", "unknown"})
#: ``broken_basis`` of a row that lost its GPU (forensics/findings/broken.py, exposure.py)
_BROKEN_BY_RELOAD = ("inferred", "bpf")
_SHOWN = ("evidence", "engine config")


def judge(window: Window, ev: Evidence) -> Cause:
    """confirmed: PID 1 logged a reload or re-exec inside the window, and the incident's pods could lose
    their GPU to it (shown, or unknown without contradiction); inferred: the same, but two sources
    disagree on the cgroup driver (named), or no reload in the part of the window the journal covers
    while the mechanism is shown to fit; excluded: the journal covers the window and PID 1 logged none,
    or the incident's pods keep their GPU across a reload (devices in the spec, cgroupfs), or the symptom
    is not one a reload produces; undetermined: no journal covers the window and nothing shows the
    mechanism. Each reload is cited with its requester (caller line, or inferred from the timeline)."""
    rows = S.rows(ev)
    return weigh(KIND, happened(window, ev), mechanism(ev, rows), {"scope": rows[1]})


def happened(window: Window, ev: Evidence) -> Happened:
    """PID 1's trusted reload and re-exec lines inside the window, each with its requester."""
    start, end = window
    hits = [e for e in ev.events if e.kind in RELOAD_KINDS and start <= e.at <= end and not UNTRUSTED & set(e.flags)]
    if not hits:
        h = coverage_of(("journal",), ev, window, "PID 1 logged no daemon-reload or daemon-reexec")
        if h.state == "unknown":
            h.said = "No journal covers the window, so no source can show or rule out a reload in it."
        return h
    asked = [requester(r, ev.events) for r in hits]
    req, first = asked[0], hits[0]
    cited = [cite(e) for e in hits]
    more = ""
    if len(hits) > 1:  # each cited with its own requester; the first revokes, the later ones rebuild the same rules
        each = "; ".join(f"{iso_z(r.at)} (line {r.evidence.get('line')}), {describe_requester(q, others=False)}"
                         for r, q in zip(hits, asked))
        more = (f" ({len(hits)} reloads in the window; the first one revokes the device rules, so it is the one "
                f"reported, and each later one rebuilds the same rules: {each})")
        for c, q in zip(cited, asked):
            c["requested_by"] = {k: v for k, v in q.items() if k != "_evidence"}
    gaps = [g for g in [gap_sentence("journal", ev.coverage.get("journal"), start, end)] if g]
    if req["basis"] != "caller-line":  # who asked is read from package history too: its gaps before the reload
        gaps += [g for n in ("dpkg", "apt") if n in ev.coverage
                 and (g := gap_sentence(n, ev.coverage[n], first.at - REQUESTER_LOOKBACK, first.at))]
    j = ev.coverage.get("journal")
    if j and j.start and j.start > start:
        more += (f"; the journal starts only at {human(j.start)}, so an earlier reload in the window cannot be "
                 "seen and this one may not be the first")
    said = (f"PID 1 logged the {_what(first)} at {human(first.at)}, inside the window{more} "
            f"({first.evidence.get('artifact')} line {first.evidence.get('line')}); {describe_requester(req)}.")
    return Happened("yes", said, at=first.at, evidence=cited + req.pop("_evidence", []), gaps=gaps,
                    requested_by=req)


def _what(e) -> str:
    return "daemon-reexec" if e.kind == "journal.reexec" else "daemon-reload"


def mechanism(ev: Evidence, rows: tuple | None = None) -> Mechanism:
    """Whether a reload could take the GPU of the incident's pods (module docstring); ``rows``: what
    :func:`forensics.findings.scope.rows` gives for ``ev``, when the caller has it already."""
    if (no := explains(EXPLAINS, ev.scope, TITLE)) is not None:
        return no
    rows, where, named = rows or S.rows(ev)
    if not rows and (none := S.gpu_free(ev)):
        return Mechanism("ruled-out", f"A reload could not revoke a GPU here: {none}.")
    if not rows:
        why = S.unassessed(ev) or ("the node holds no container of them now" if named else "no GPU container was found")
        return _from_checkpoint(ev, where) or Mechanism("fits", f"Whether a reload could revoke the GPU of {where} "
                                                                f"is unknown: {why}.")
    judged = [(r, *_row(r)) for r in rows]
    for state in ("disputed", "shown", "fits"):
        picked = [(r, said) for r, st, said in judged if st == state]
        if picked:
            if state == "disputed":
                return Mechanism("disputed", f"For {where}: {_grouped(picked)}.",
                                 contradictions=[f"{_name(r)}: {r.get('cgroup_driver_conflict')}" for r, _ in picked])
            lead = "A reload revokes the GPU of" if state == "shown" else "A reload may revoke the GPU of"
            return Mechanism(state, f"{lead} {where}: {_grouped(picked)}.")
    return Mechanism("ruled-out", f"A reload could not revoke the GPU of {where}: "
                     f"{_grouped([(r, said) for r, _st, said in judged])}.")


def _grouped(picked: list[tuple[dict, str]], most: int = 4) -> str:
    """``"ns/a and ns/b: clause; ns/c: other clause"``: the containers that share a clause named together."""
    by: dict[str, dict[str, int]] = {}
    for r, said in picked:
        names = by.setdefault(said, {})
        names[_name(r)] = names.get(_name(r), 0) + 1
    if len(by) == 1:  # one clause for all of them: the sentence already names them
        return next(iter(by))

    def named(counts: dict[str, int]) -> str:  # a pod with several containers is named once, with their count
        names = [f"{n} ({c} containers)" if c > 1 else n for n, c in counts.items()]
        return " and ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
    parts = [f"{named(counts)}: {said}" for said, counts in by.items()]
    return "; ".join(parts[:most]) + (f"; and {len(parts) - most} more" if len(parts) > most else "")


def _from_checkpoint(ev: Evidence, where: str) -> Mechanism | None:
    """What the kubelet's device-plugin checkpoint says of the incident's pods when no container of theirs is
    on the node any more (a dead node's disk): the plugin's answer for them passed device specs or CDI devices
    (the GPU was in the spec: a reload re-applies it) or neither (the envvar strategy: outside the spec); the
    cgroup driver then comes from the engine's config, if the node showed it. ``None`` when it says nothing."""
    ck = (ev.facts.get("kubelet") or {}).get("device_checkpoint") or {}
    mine = [e for e in ck.get("entries") or [] if isinstance(e, dict)
            and S.pod_key(e.get("namespace"), e.get("pod")) in ev.scope.pods]
    if not mine or any(e.get("device_specs_passed") is None for e in mine):
        return None
    src = ck.get("source") or "kubelet_internal_checkpoint"
    if all(e.get("device_specs_passed") or e.get("cdi_devices_passed") for e in mine):
        return Mechanism("ruled-out", f"The device plugin passed {where} its GPU as device specs or CDI devices "
                         f"({src}): it is in the OCI spec, so a reload re-applies it.")
    engines = ev.facts.get("engine_cgroup_driver") or {}
    shown = {k: v for k, v in engines.items() if isinstance(v, dict) and v.get("value")}
    said = (f"The device plugin passed {where} no device specs and no CDI devices ({src}): the GPU came outside "
            "the OCI spec")
    if shown and all(v["value"] == "cgroupfs" for v in shown.values()):
        return Mechanism("ruled-out", f"{said}, but the engine's config sets the cgroupfs driver "
                         f"({'; '.join(str(v.get('source')) for v in shown.values())}), which a reload does not touch.")
    if shown and any(v["value"] == "systemd" for v in shown.values()):
        return Mechanism("shown", f"{said}, under the systemd driver the engine's config sets "
                         f"({'; '.join(str(v.get('source')) for v in shown.values() if v['value'] == 'systemd')}).")
    return Mechanism("fits", f"{said}; the cgroup driver is not shown.")


def _name(r: dict) -> str:
    return f"{r.get('namespace') or ''}/{r.get('pod') or str(r.get('id') or '?')[:12]}"


def _row(r: dict) -> tuple[str, str]:
    """``(state, clause)`` for one exposure row: what a reload does to that container's GPU."""
    inj, driver, basis = r.get("gpu_injection"), r.get("cgroup_driver"), r.get("cgroup_driver_basis")
    src = r.get("cgroup_driver_source") or basis or "unknown"
    trap = bool(r.get("dev_char_missing") or r.get("runc_skipped"))
    if r.get("broken") and r.get("broken_basis") in _BROKEN_BY_RELOAD:
        return "shown", f"its GPU is already revoked ({r.get('broken_basis')}: {(r.get('broken_evidence') or [{}])[0].get('summary') or 'after a reload'})"
    if inj == "unknown":
        return "fits", f"its config.json was not read ({r.get('spec_detail') or 'unknown'}), so how it got its GPU is unknown"
    if r.get("cgroup_driver_conflict") and (inj == "hook" or trap):
        return "disputed", f"hook-injected, and the sources disagree on its cgroup driver ({r['cgroup_driver_conflict']})"
    how = "injected outside the OCI spec (hook)" if inj == "hook" else "caught by the /dev/char trap" if trap else None
    if how is None:  # devices in the spec: a reload re-applies them, unless something else revoked them
        if r.get("broken"):
            return "fits", (f"its devices are in the OCI spec, yet it lost them ({r.get('broken_basis')}); the /dev/char "
                            "trap cannot be ruled out")
        return "ruled-out", f"its GPU is in the OCI spec ({inj}), so a reload re-applies it"
    if driver == "systemd":
        return ("shown" if basis in _SHOWN else "fits"), f"{how} under the systemd driver ({src})"
    if driver == "cgroupfs":
        if basis in _SHOWN:
            return "ruled-out", f"{how}, but under the cgroupfs driver ({src}): a reload does not rewrite its device rules"
        return "fits", f"{how}; the cgroupfs driver is only assumed ({src})"
    return "fits", f"{how}; its cgroup driver is unknown ({src})"


def remedy(cause: Cause, ev: Evidence) -> dict:
    """Recreate the pods that lost their GPU, then move the GPU into the OCI spec (the exposure's remedies)
    so the next reload re-applies it; the drill proves it."""
    rows, _, _ = S.rows(ev)
    lost = [r for r in rows if r.get("broken") or r.get("at_risk")]
    cmds, bad = recreate(lost)
    cmds.append("sudo gpu-forensics drill --yes-reload-systemd")
    return {"what": "Recreate the pods that lost their GPU, and move the node's GPU injection into the OCI spec "
                    "(CDI, or the device plugin's device specs) so that a daemon-reload re-applies it",
            "commands": cmds,
            "why": "Under the systemd cgroup driver every daemon-reload (and re-exec) rebuilds each scope's device "
                   "allowlist from DeviceAllow=, which never held a GPU injected outside the spec; the remedies in "
                   "the exposure section say which change fits this node's stack."
                   + "".join(f" Not in a command: {h}." for h in bad),
            "sources": ["https://github.com/NVIDIA/nvidia-container-toolkit/issues/48"]}


def sentence(cause: Cause, when: str) -> str:
    """'... is CONFIRMED at <when>, requested by X; PID 1 logged the reload inside the window and systemd
    logged the caller.' for a confirmed reload; the reason otherwise."""
    if cause.verdict != "confirmed":
        return cause.reason
    by = describe_requester(cause.requested_by)
    basis = {"caller-line": "systemd logged the caller", "inferred": "the requester is inferred"}.get(
        (cause.requested_by or {}).get("basis"), "the requester is unknown")
    return f"at {when}, {by}; PID 1 logged the reload inside the window and {basis}."


RULE = Rule(KIND, TITLE, EXPLAINS, ("journal", "dpkg", "apt", "exposure: containers"), judge, remedy, sentence,
            severity="config")
