"""The report never contradicts itself (issue 26 item 4): the checks one analysis.json must pass between
its headline, its verdicts, its causes-checked table and its exposure section. :func:`contradictions`
lists every breach as a sentence; ``analyze`` adds them to ``problems`` (so a breach is shown, never
hidden) and the tests run it over every sample and generated node.

The exposure section assesses one cause's mechanism (``exposure["assesses"]``, the daemon-reload: which
containers a reload would take the GPU of, and which it already has), so for that cause:

- a container the exposure marks broken by that cause (``broken_cause``), at a time inside an incident's
  window, in that incident's pods (or any pod when the incident names none), leaves that cause not
  excluded for the incident;
- the cause confirmed or inferred with its mechanism ``shown`` needs a container of that incident at
  risk or broken (the rows are where the mechanism was shown);
- an exposure verdict that every GPU container keeps its devices ("Not exposed") leaves the cause's
  mechanism never ``shown``.

For every cause: the headline's verdict is the best of the causes' (a confirmed cause makes it
"confirmed"), the cause it names fits in the incident it names, it is never "excluded"; the
causes-checked table holds exactly the incidents' verdicts. The top agrees with itself (issue 28): the
verdict sentences say what the headline names, and name each cause it calls ruled out though it happened;
the incidents come surest first, then by time; a source the gaps say covers a span is never listed as an
empty file among the problems; the exposure and the stack give one driver root; a package transaction
never fits where the reload, its only way to the symptom, is excluded.
"""
from __future__ import annotations

from datetime import datetime

from .scope import select

_FIT = ("confirmed", "inferred")


def _t(text) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def _rows_of(inc: dict, rows: list[dict]) -> list[dict]:
    """The exposure rows the incident's causes were judged on (the rule's own selection)."""
    return select(rows, set(inc.get("pods") or []), set(inc.get("containers") or []),
                  _t((inc.get("window") or {}).get("end")))[0]


def contradictions(a: dict) -> list[str]:
    """Every way ``a`` (analysis/v1) contradicts itself, as sentences; ``[]`` when it does not."""
    out: list[str] = []
    incidents = a.get("incidents") or []
    exp = a.get("exposure") or {}
    rows = [r for r in exp.get("containers") or [] if isinstance(r, dict)]
    kind = exp.get("assesses")
    for inc in incidents:
        causes = {c["kind"]: c for c in inc.get("causes") or []}
        c = causes.get(kind) if kind else None
        if c is None:
            continue
        start, end = _t(inc["window"]["start"]), _t(inc["window"]["end"])
        mine = _rows_of(inc, rows)
        for r in mine:
            at = _t(((r.get("broken_evidence") or [{}])[0]).get("at"))
            if r.get("broken_cause") == kind and at and start and end and start <= at <= end and c["verdict"] == "excluded":
                out.append(f"{inc['id']}: the exposure says {r.get('namespace')}/{r.get('pod')} lost its GPU to {kind} at "
                           f"{at.isoformat()}, inside the window, yet {kind} is excluded")
        if c["verdict"] in _FIT and c.get("mechanism") == "shown" and not any(r.get("at_risk") or r.get("broken")
                                                                                 for r in mine):
            out.append(f"{inc['id']}: {kind} is {c['verdict']} with its mechanism shown, yet the exposure shows no "
                       "container of the incident at risk or broken")
        if str(exp.get("verdict") or "").startswith("Not exposed") and c.get("mechanism") == "shown":
            out.append(f"{inc['id']}: the exposure says no GPU container is exposed, yet {kind}'s mechanism is shown")
    out += _headline(a, incidents)
    out += _table(a, incidents)
    out += _said_at_the_top(a, incidents)
    out += _coverage_vs_problems(a)
    out += _driver_root(exp)
    out += _transaction_without_its_path(incidents)
    return out


_RANK = ("confirmed", "inferred", "undetermined", "excluded")


def _best(inc: dict) -> int:
    return min((_RANK.index(c["verdict"]) for c in inc.get("causes") or [] if c.get("verdict") in _RANK),
               default=len(_RANK))


def _said_at_the_top(a: dict, incidents: list[dict]) -> list[str]:
    """The headline agrees with the verdict sentences under it, and the incidents come surest first."""
    out, h = [], a.get("headline") or {}
    said = a.get("verdicts") or []
    titles = {c["kind"]: c.get("title") or c["kind"] for inc in incidents for c in inc.get("causes") or []}
    if h.get("cause") and h.get("verdict") in _FIT and not any(
            s.startswith(f"Incident {h.get('incident')} (") and f"{titles.get(h['cause'], h['cause'])} is "
            f"{str(h['verdict']).upper()}" in s for s in said):
        out.append(f"the headline names {h['cause']} ({h.get('incident')}) {h['verdict']}, which no verdict sentence says")
    if h.get("verdict") in ("undetermined", "none") and any(" is CONFIRMED" in s or " is INFERRED" in s for s in said):
        out.append(f"the headline says {h.get('verdict')}, yet a verdict sentence confirms or infers a cause")
    for title in h.get("ruled_out") or []:
        if not any(f"{title} is EXCLUDED" in s for s in said):
            out.append(f"the headline says {title} happened and is ruled out, which no verdict sentence says")
    ranks = [(_best(i), (i.get("window") or {}).get("start") or "") for i in incidents]
    if ranks != sorted(ranks):
        out.append("the incidents are not in order of certainty, then time: "
                   + ", ".join(f"{i['id']} ({_RANK[r] if r < len(_RANK) else 'none'})" for i, (r, _) in zip(incidents, ranks)))
    return out


#: where each source's artifacts lie in the bundle
_SOURCE_DIRS = {"dpkg": "packages/dpkg/", "apt": "packages/apt/", "unattended-upgrades": "packages/unattended-upgrades/",
                "journal": "journal/"}


def _coverage_vs_problems(a: dict) -> list[str]:
    """A source the gaps say covers a span is not listed among the problems as empty."""
    out = []
    for g in a.get("gaps") or []:
        d = _SOURCE_DIRS.get(g.get("source"))
        if not d or not (g.get("covers") or {}).get("start"):
            continue
        for p in a.get("problems") or []:
            if str(p.get("artifact") or "").startswith(d) and str(p.get("message") or "").startswith("empty file"):
                out.append(f"{p['artifact']} is listed as an empty file while {g['source']} covers "
                           f"{g['covers']['start']} .. {g['covers'].get('end')}")
    return out


def _driver_root(exp: dict) -> list[str]:
    """One driver root: the exposure's setting is the stack's."""
    st = exp.get("stack")
    if exp.get("assessed") and isinstance(st, dict) and exp.get("driver_root") != st.get("driver_root"):
        return [f"the exposure says the driver root is {exp.get('driver_root')}, the stack says {st.get('driver_root')}"]
    return []


def _transaction_without_its_path(incidents: list[dict]) -> list[str]:
    """A package transaction acts through a reload or a driver change: it does not fit where the reload is
    excluded and the symptom is none a driver change produces."""
    from .causes.transaction import DRIVER_SYMPTOMS
    out = []
    for inc in incidents:
        v = {c["kind"]: c["verdict"] for c in inc.get("causes") or []}
        if (v.get("package-transaction") in _FIT and v.get("daemon-reload") == "excluded"
                and inc.get("symptom_class") not in DRIVER_SYMPTOMS):
            out.append(f"{inc['id']}: a package transaction is {v['package-transaction']} while the daemon-reload, "
                       "its only way to this symptom, is excluded")
    return out


def _headline(a: dict, incidents: list[dict]) -> list[str]:
    h = a.get("headline") or {}
    verdicts = [c["verdict"] for inc in incidents for c in inc.get("causes") or []]
    out = []
    if h.get("verdict") == "excluded":
        out.append("the headline says excluded: a ruled-out cause is no answer")
    if "confirmed" in verdicts and h.get("verdict") != "confirmed":
        out.append(f"a cause is confirmed, yet the headline says {h.get('verdict')}")
    if "confirmed" not in verdicts and "inferred" in verdicts and h.get("verdict") != "inferred":
        out.append(f"the best cause is inferred, yet the headline says {h.get('verdict')}")
    if h.get("cause"):
        named = [c for inc in incidents if inc["id"] == h.get("incident") for c in inc.get("causes") or []
                 if c["kind"] == h["cause"]]
        if not named or named[0]["verdict"] != h.get("verdict"):
            out.append(f"the headline names {h['cause']} ({h.get('incident')}) as {h.get('verdict')}, which the "
                       "incident's causes do not say")
    return out


def _table(a: dict, incidents: list[dict]) -> list[str]:
    if "causes_checked" not in a:
        return []
    table = {(row["kind"], v["incident"]): v["verdict"] for row in a["causes_checked"] for v in row["incidents"]}
    causes = {(c["kind"], inc["id"]): c["verdict"] for inc in incidents for c in inc.get("causes") or []}
    return [f"the causes-checked table says {k[0]} is {table.get(k)} for {k[1]}, the incident says {v}"
            for k, v in causes.items() if table.get(k) != v]
