"""The verdicts as the report says them: each cause's sentence (:func:`verdict_sentence`), the incidents in
the order of their certainty (:func:`by_certainty`), the one-line answer at the top (:func:`headline`) and the
table of every cause checked (:func:`causes_checked`). :mod:`forensics.findings.analysis` assembles them into
analysis.json. Nothing here reads the bundle.
"""
from __future__ import annotations

from ..timeutil import human, iso_z, local_iso
from .causes import RULES, TITLES
from .correlator import window_text
from .scope import broke
from .verdicts import MECHANISMS


def _cause_json(c, tz) -> dict:
    return {"kind": c.kind, "title": TITLES.get(c.kind, c.kind), "verdict": c.verdict, "at": iso_z(c.at),
            "local": local_iso(c.at, tz), "requested_by": c.requested_by, "evidence": c.evidence, "gaps": c.gaps,
            "reason": c.reason, "contradictions": c.contradictions, "mechanism": c.mechanism, "remedy": c.remedy,
            "detail": c.detail}


def verdict_sentence(inc, cause, tz) -> str:
    """One sentence per verdict for the top of the report: what, when (node time and UTC), by whom,
    how sure and why (a rule's own ``sentence`` words a confirmed cause when it has one)."""
    when = human(cause.at, tz)
    rule = RULES.get(cause.kind)
    name = TITLES.get(cause.kind, cause.kind)
    head = f"Incident {inc.id} ({inc.label or window_text(inc)}): "
    if cause.verdict == "confirmed":
        if rule is not None and rule.sentence is not None:
            return f"{head}{name} is CONFIRMED {rule.sentence(cause, when)}"
        return f"{head}{name} is CONFIRMED at {when}. {cause.reason}"
    if cause.verdict == "inferred":
        return f"{head}{name} is INFERRED, not confirmed: {cause.reason}"
    if cause.verdict == "excluded":
        return f"{head}{name} is EXCLUDED: {cause.reason}"
    return f"{head}{name} is UNDETERMINED: {cause.reason}"


#: how far a verdict goes, surest first: the headline takes the surest cause that fits
FITS = ("confirmed", "inferred")
#: an incident's place in the report: by its surest cause's verdict (every cause excluded last)
CERTAINTY = ("confirmed", "inferred", "undetermined", "excluded")


def by_certainty(incidents: list) -> list:
    """``incidents`` in the order the report tells them: the one with a confirmed cause first, then
    inferred, then undetermined, then those whose every cause is excluded; within each, by window start
    (UTC), then id. Their ids stay as the correlator numbered them (by time)."""
    def key(inc):
        best = min((CERTAINTY.index(c.verdict) for c in inc.causes if c.verdict in CERTAINTY), default=len(CERTAINTY))
        return best, inc.start, inc.id
    return sorted(incidents, key=key)


def happened_but_ruled_out(cause) -> bool:
    """True for a cause the evidence shows happened in the window (it has a time) that could not have
    done it here: the report names it at the top, never only in the table."""
    return cause.verdict == "excluded" and cause.at is not None and cause.mechanism == "ruled-out"


def verdict_sentences(incidents: list, tz) -> list[str]:
    """analysis.json's ``verdicts``: per incident (in the report's order), a sentence for each cause that
    fits, then one for each cause that happened in the window and is ruled out (a person's reload beside
    an application's fault); an incident with neither gets its first cause's sentence."""
    out = []
    for inc in incidents:
        said = [verdict_sentence(inc, c, tz) for c in inc.causes if c.verdict in FITS]
        said += [verdict_sentence(inc, c, tz) for c in inc.causes if happened_but_ruled_out(c)]
        out += said or ([verdict_sentence(inc, inc.causes[0], tz)] if inc.causes else [])
    return out
#: ``broken_basis`` values of a container broken by inference (from PID 1's reload), not by a probe or its rules
INFERRED = ("inferred", "bpf")
_ORDER = {k: i for i, k in enumerate(RULES)}


def _lost(exposed: dict) -> str:
    """The headline's tail: how many containers lost GPU access (how many of them by inference) and how
    many could not be assessed (their config.json unread)."""
    broken = [r for r in exposed.get("containers") or [] if r.get("broken")]
    guessed = sum(r.get("broken_basis") in INFERRED for r in broken)
    unread = exposed.get("unknown_containers") or []
    return ((f"; {len(broken)} container{'s' if len(broken) != 1 else ''} lost GPU access" if broken else "")
            + (f" ({guessed} inferred from {TITLES.get(_broken_cause(broken), 'the evidence')}, no probe ran)"
               if guessed else "")
            + (f"; {len(unread)} container{'s' if len(unread) != 1 else ''} could not be assessed (config.json "
               + "; ".join(dict.fromkeys(str(r.get("spec_detail") or "not read") for r in unread)) + ")"
               if unread else "")
            + ("" if exposed.get("assessed", True) else f"; exposure unknown: {exposed.get('reason')}"))


def _broken_cause(rows: list[dict]) -> str | None:
    return next((r.get("broken_cause") for r in rows if r.get("broken_cause")), None)


def rank(pairs: list) -> list:
    """``(incident, cause)`` pairs that fit, best supported first: confirmed before inferred, then by
    :data:`~forensics.findings.verdicts.MECHANISMS` (a mechanism the node shows before one that only fits),
    then the rules' order
    (:data:`forensics.findings.causes.RULES`), then the incident's order."""
    fit = [(n, inc, c) for n, (inc, c) in enumerate(pairs) if c.verdict in FITS]
    fit.sort(key=lambda x: (FITS.index(x[2].verdict), MECHANISMS.get(x[2].mechanism, 1), _ORDER.get(x[2].kind, 99), x[0]))
    return [(inc, c) for _, inc, c in fit]


def headline(incidents, exposed: dict) -> dict:
    """The report's answer in one line, from the causes and the exposure together:
    ``{"verdict": "confirmed" | "inferred" | "undetermined" | "none", "text": str, "cause", "incident",
    "severity", "remedy"}`` (the last four only when a cause fits).

    confirmed / inferred: the best-supported cause that fits across every incident and every class
    (:func:`rank`), its contradictions said, the other causes that fit named, and the causes that
    happened in the window but could not have done it named as ruled out (never hidden); its rule's
    remedy and severity (``node``: the node's GPU or driver needs action first). undetermined: an
    incident or a broken container and no cause that fits (all excluded reads "none of the known causes
    fits"); none: no incident and nothing broken. Never "excluded". Containers broken by inference
    (``broken_basis`` in :data:`INFERRED`) open no incident; with no incident they make the headline
    "inferred", naming the cause the exposure inferred it from (``broken_cause``). Raises nothing for
    missing keys."""
    broken = [r for r in exposed.get("containers") or [] if r.get("broken")]
    lost = _lost(exposed)
    causes = [(inc, c) for inc in incidents for c in inc.causes]
    ranked = rank(causes)
    if ranked:
        inc, c = ranked[0]
        said = "; the sources contradict each other (see the cause)" if c.contradictions else ""
        also = [f"{TITLES.get(x.kind, x.kind)} ({i.id}, {x.verdict})" for i, x in ranked[1:4] if (i, x) != (inc, c)]
        out = [f"ruled out though it happened: {TITLES.get(x.kind, x.kind)} ({i.id})" for i, x in causes
               if happened_but_ruled_out(x)]
        text = (f"{c.verdict}: {TITLES.get(c.kind, c.kind)} ({inc.id}){said}"
                + (f"; also fits: {', '.join(also)}" if also else "") + "".join(f"; {o}" for o in dict.fromkeys(out))
                + lost)
        rule = RULES.get(c.kind)
        return {"verdict": c.verdict, "text": text, "cause": c.kind, "incident": inc.id,
                "severity": rule.severity if rule else None, "remedy": c.remedy,
                "broke": broke(incidents, exposed), "ruled_out": list(dict.fromkeys(
                    TITLES.get(x.kind, x.kind) for _, x in causes if happened_but_ruled_out(x)))}
    if not causes:
        if broken and all(r.get("broken_basis") in INFERRED for r in broken):
            first = min((r["broken_evidence"][0] for r in broken if r.get("broken_evidence")),
                        key=lambda e: e.get("at") or "", default={})
            names = sorted({f"{r.get('namespace') or ''}/{r.get('pod') or r.get('id')}" for r in broken})
            return {"verdict": "inferred", "text": f"inferred: {TITLES.get(_broken_cause(broken), 'an unknown cause')} "
                    f"(its {first.get('source') or 'evidence'} line at {first.get('at')}, after the containers were "
                    f"created) most likely took the GPU of {', '.join(names[:3])}{' and more' if len(names) > 3 else ''}"
                    f"{lost}; --probe would settle it"}
        if broken:
            return {"verdict": "undetermined", "text": f"undetermined: no incident window was found, so no known "
                    f"cause was weighed{lost}"}
        return {"verdict": "none", "text": f"none: no incident was found{lost}"}
    open_ = sorted({TITLES.get(c.kind, c.kind) for _, c in causes if c.verdict == "undetermined"})
    if not open_:
        return {"verdict": "undetermined", "text": "undetermined: none of the known causes fits (each one is "
                f"excluded){lost}"}
    return {"verdict": "undetermined", "text": f"undetermined: no known cause is confirmed or inferred; "
            f"{', '.join(open_)} can be neither shown nor ruled out{lost}"}


def causes_checked(incidents) -> list[dict]:
    """analysis.json's ``causes_checked``: one row per rule of :data:`forensics.findings.causes.RULES`, in
    its order: ``{"kind", "title", "explains", "needs", "incidents": [{"incident", "verdict", "mechanism",
    "reason", "evidence" (count), "gaps"}]}``, so the reader sees every cause ruled in or out, and why."""
    return [{"kind": k, "title": r.title, "explains": sorted(r.explains), "needs": list(r.needs),
             "incidents": [{"incident": inc.id, "verdict": c.verdict, "mechanism": c.mechanism, "reason": c.reason,
                            "evidence": len(c.evidence), "gaps": c.gaps}
                           for inc in incidents for c in inc.causes if c.kind == k]}
            for k, r in RULES.items()]
