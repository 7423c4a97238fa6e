"""report.md: the text pasted into a ticket, as Markdown (GitHub, GitLab) or Jira wiki markup.

The text is built in sections. What the on-call engineer acts on is never cut: the verdicts, each
incident's symptom, each evidence gap, the remedies with their commands, "How to verify the fix" (only
where a fix is due) and the last line, the bundle's name and manifest SHA-256. To stay under
``limit`` (render.MD_LIMIT) the detail goes first, in this order (:data:`DROP_ORDER`): the alert audit summary, the
causes rows the evidence excluded (a count stays), the per-container exposure list and notes, the
read-only checks of the other GPU failures, the rest of the causes table, the contradictions. What was
dropped is named in a note; report.html holds everything. Only when the kept parts alone are longer
does the text pass the limit (a note says so): a whole verdict beats a short ticket.

Jira wiki markup: ``h3.`` headings, ``||header||`` and ``|cell|`` tables, ``*bold*``, ``{code}`` blocks,
``{{monospace}}`` (Atlassian's "Text Formatting Notation Help").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from forensics.timeutil import to_second
from forensics.words import count_of

from .timeline import inert

#: the droppable sections, first dropped first
DROP_ORDER = ("alerts", "excluded-causes", "containers", "checks", "causes", "contradictions")

_MD_SPECIAL = re.compile(r"([\\<>\[\]|`])")
_JIRA_SPECIAL = re.compile(r"([\\|\[\]{}*_+^~!#]|(?<!\S)-)")
_JIRA_ENTITIES = {"\\": "&#92;", "|": "&#124;"}
_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x85\u2028\u2029]+")


def md(value) -> str:
    """Evidence text made inert in Markdown: a backslash, ``<``, ``>``, ``[``, ``]``, ``|`` and backticks
    are escaped with a backslash, so no HTML tag, link, table cell or code span can be opened from the
    evidence, and line breaks become spaces, so no heading, list or block can be started; any other
    control character becomes a visible escape (:func:`reports.timeline.inert`: no ESC reaches a terminal
    showing the text). ``None`` becomes the empty string."""
    if value is None:
        return ""
    return _MD_SPECIAL.sub(r"\\\1", inert(_LINE_BREAKS.sub(" ", str(value))))


def jira(value) -> str:
    """Evidence text made inert in Jira wiki markup: the characters that open a link, macro or text effect
    (``[ ] { } * _ + ^ ~ ! # -``) get a backslash; a backslash and ``|`` become the entities ``&#92;`` and
    ``&#124;`` (Jira reads ``\\\\`` as a line break, and a table cell ends at ``|`` whatever precedes it in
    some renderers); line breaks become spaces; other control characters become visible escapes (as
    :func:`md`). ``None`` becomes ``""``."""
    if value is None:
        return ""
    return _JIRA_SPECIAL.sub(_jira_one, inert(_LINE_BREAKS.sub(" ", str(value))))


def _jira_one(m: re.Match) -> str:
    c = m.group(1)
    return _JIRA_ENTITIES.get(c) or "\\" + c


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _md_code(text: str) -> list[str]:
    fence = "````" if "```" in text else "```"
    return [fence + "sh", text, fence]


def _jira_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["||" + "||".join(head) + "||"] + ["|" + "|".join(c or " " for c in r) + "|" for r in rows]


def _jira_code(text: str) -> list[str]:
    return ["{code:bash}", text.replace("{code", "{ code"), "{code}"]


@dataclass(frozen=True)
class _Flavor:
    """How one markup writes each piece: ``title``/``h``/``b``/``mono`` as format strings."""
    esc: Callable[[object], str]
    title_fmt: str
    h_fmt: str
    b_fmt: str
    mono_fmt: str
    table: Callable[[list[str], list[list[str]]], list[str]]
    code: Callable[[str], list[str]]

    def title(self, text: str) -> str:
        return self.title_fmt.format(text)

    def h(self, text: str) -> str:
        return self.h_fmt.format(text)

    def b(self, text: str) -> str:
        return self.b_fmt.format(text)

    def mono(self, text: str) -> str:
        return self.mono_fmt.format(text)


_FLAVORS = {"markdown": _Flavor(md, "## {}", "### {}", "**{}**", "`{}`", _md_table, _md_code),
            "jira": _Flavor(jira, "h2. {}", "h3. {}", "*{}*", "{{{{{}}}}}", _jira_table, _jira_code)}
#: the ticket flavours, the first the default (``--markdown-flavor``, reports/formats.py)
FLAVORS = tuple(_FLAVORS)


def render(a: dict, limit: int, banner: str = "", flavor: str = "markdown") -> str:
    """``a`` (analysis/v1) as ticket text in ``flavor`` (``"markdown"`` or ``"jira"``; another raises
    ``KeyError``), ``banner`` (the integrity banner, already in that flavor) first; shortened to
    ``limit`` characters as the module docstring says."""
    f = _FLAVORS[flavor]
    parts = _sections(a, f)
    dropped: list[str] = []

    def join() -> str:
        note = ([f"(Shortened for the ticket: left out {', '.join(dropped)}; report.html holds everything.)", ""]
                if dropped else [])
        skip = set(dropped) | ({"excluded-note"} if "excluded-causes" not in dropped or "causes" in dropped else set())
        body = "\n".join(line for name, lines in parts if name not in skip for line in lines)
        return banner + body + "\n\n" + "\n".join(note) + _last(a, f) + "\n"

    text = join()
    for name in DROP_ORDER:
        if len(text) <= limit:
            break
        if any(n == name for n, _ in parts):
            dropped.append(name)
            text = join()
    if len(text) > limit:
        text = text[:-len(_last(a, f)) - 1] + (f"(The verdicts, symptoms, gaps and remedies alone pass {limit} "
                                                "characters; they are kept whole.)\n\n") + _last(a, f) + "\n"
    return text


def _last(a: dict, f) -> str:
    return f"Bundle {f.esc(a['bundle'].get('path'))}, manifest SHA-256 {f.mono(f.esc(a['bundle'].get('manifest_sha256')))}."


def _sections(a: dict, f) -> list[tuple[str, list[str]]]:
    """The text as ``(name, lines)``; a name of :data:`DROP_ORDER` marks a part that may be left out."""
    e, out = f.esc, []
    out.append(("head", [f.title(f"GPU forensics: {e(a.get('node') or 'unknown node')}"), "",
                         f"Collected {e(to_second(a.get('collected_at')))}, node zone {e((a.get('timezone') or {}).get('name'))}.", ""]))
    if a.get("red_flags"):
        out.append(("red-flags", [f.h("Red flags: forged journal lines")] + [
            f"- {e(to_second(r['at']))}: someone wrote as {e(r['claim'])} ({e(r.get('claimed_identifier') or '-')}"
            f"\\[{e(r.get('claimed_pid') or '-')}\\]) but journald recorded _PID={e(r['pid'])} "
            f"_COMM={e(r.get('comm') or '-')} _UID={e(r['uid'])} _TRANSPORT={e(r.get('transport') or '-')}: "
            f"{e(r.get('message'))} (never counted as evidence)" for r in a["red_flags"]] + [""]))
    v = [f.h("Verdicts")]
    if a.get("headline"):
        v += ["", f.b(e(a["headline"]["text"])), ""]
        said = broke_sentence(a["headline"].get("broke"))
        v += [e(said), ""] if said else []
    v += [f"- {e(s)}" for s in a.get("verdicts") or []] or ["- No incident found."]
    out.append(("verdicts", v + [""]))
    _first_action(out, a, f)
    incidents = a.get("incidents") or []
    if incidents:
        out.append(("symptoms", [f.h("Symptoms")] + [f"- {e(i['id'])}: {e(i.get('symptom'))}" for i in incidents] + [""]))
    _causes(out, incidents, f)
    _exposure(out, a, f)
    _host_gpu(out, a, f)
    _other_failures(out, a, f)
    _alerts(out, a, f)
    out.append(("gaps", [f.h("Evidence gaps")] + [_gap(g, f) for g in a.get("gaps") or []] + [""]))
    _remedies(out, a, f)
    return out


def _alerts(out: list, a: dict, f) -> None:
    """What Prometheus recorded of the node's alerts, then the audit's answer (would they have fired)."""
    e, m = f.esc, a.get("metrics") or {}
    audit, recorded = m.get("alert_audit") or {}, m.get("alerts_recorded") or {}
    lines = [f"- Recorded: {e(recorded['summary'])}"] if m.get("collected") and recorded.get("summary") else []
    if m.get("collected") and audit.get("audited"):
        lines.append(f"- Would they have fired: {e(audit.get('summary'))} Suggested rules: "
                     f"{f.mono('gpu-alerts.rules.yml')} beside the report.")
    if lines:
        out.append(("alerts", [f.h("Alerts"), *lines, ""]))


def broke_sentence(b: dict | None) -> str:
    """"What broke: pods ns/a, ns/b; container web (1a2b3c4d5e6f), with no pod; GPUs GPU-..." from the headline's
    ``broke``, or ``""``."""
    b = b or {}
    parts = [f"pod{'s' if len(b.get('pods') or []) != 1 else ''} {', '.join(b['pods'])}" if b.get("pods") else "",
             f"container{'s' if len(b.get('containers') or []) != 1 else ''} {', '.join(b['containers'])}, with no pod"
             if b.get("containers") else "",
             f"GPU{'s' if len(b.get('gpus') or []) != 1 else ''} {', '.join(b['gpus'])}" if b.get("gpus") else ""]
    parts = [p for p in parts if p]
    return f"What broke: {'; '.join(parts)}." if parts else ""


def first_commands(a: dict) -> tuple[dict | None, list[str]]:
    """``(the change that fits this node, the commands to run first)``: when the headline's cause is the one the
    exposure assesses (a reload), the plan's fix (:mod:`forensics.findings.remedy_plan`) and its next steps
    come before the cause's own commands (recreate the pods, the drill), each next step's name, needs and breaks as
    one-line comments above its commands; else the cause's commands alone."""
    h = a.get("headline") or {}
    r, x = h.get("remedy") or {}, a.get("exposure") or {}
    fix = ((x.get("remedy_plan") or {}).get("fix") if x.get("assessed") and h.get("cause")
           and h.get("cause") == x.get("assesses") else None)
    cmds = list(r.get("commands") or [])
    if fix:
        steps = [fix] + [t for t in (x.get("remedy_plan") or {}).get("then") or [] if t.get("follows")]
        lines = []
        for n, step in enumerate(steps):
            if n:  # a next step's gate and what it breaks stay beside its commands, each a one-line comment
                lines += [f"# then: {_one_line(step.get('what'))}",
                          *(f"# {k}: {_one_line(step[k])}" for k in ("needs", "breaks") if step.get(k))]
            lines += [c for c in str(step.get("change") or "").splitlines() if c.strip()]
        cmds = lines + cmds
    return fix, cmds


def _one_line(text) -> str:
    """``text`` on one line (every run of whitespace, a newline too, one space): a comment in a block of
    commands never ends early."""
    return " ".join(str(text or "").split())


def _first_action(out: list, a: dict, f) -> None:
    """"What to do first": the cause's remedy, the one change that fits this node, and the commands."""
    e, r = f.esc, (a.get("headline") or {}).get("remedy")
    if not r:
        return
    fix, cmds = first_commands(a)
    lines = [f.h("What to do first"), f"{e(r.get('what'))}. {e(r.get('why'))}"]
    if fix:
        lines.append(f"On this node ({e(fix.get('stack'))}): {f.b(e(fix.get('what')))}"
                     + (f". Needs: {e(fix['needs'])}" if fix.get("needs") else "")
                     + (f". Breaks: {e(fix['breaks'])}" if fix.get("breaks") else "") + ".")
    out.append(("first-action", lines + (f.code("\n".join(cmds)) if cmds else []) + [""]))


#: a sentence ends at a period followed by a space and a capital letter or a digit; ".." (a range) is none
_SENTENCE_END = re.compile(r"(?<!\.)\.(?!\.)\s+(?=[A-Z0-9(\"'])")


def _first_sentence(text: str) -> str:
    """The reason's first sentence, whole (a cut sentence is never shown; the ``..`` of a time range
    ends none)."""
    text = str(text or "")
    m = _SENTENCE_END.search(text)
    return text if m is None else text[:m.start() + 1]


def _causes(out: list, incidents: list[dict], f) -> None:
    """The "Causes checked" table: the causes that fit (their whole reason is the verdict's sentence above);
    per incident one line naming the undetermined ones; the excluded ones (the first detail left out of a
    long ticket). Each row gives the first sentence of its reason; report.html holds every reason whole."""
    e = f.esc
    row = lambda i, c, why: [e(i["id"]) + (f" {e(i['label'])}" if i.get("label") else ""),  # noqa: E731
                             f"{e(to_second(i['window']['start']))} .. {e(to_second(i['window']['end']))}", e(c.get("title") or c["kind"]),
                             f.b(e(c["verdict"])), e(to_second(c.get("at")) or "-"), e(why)]
    pairs = [(i, c) for i in incidents for c in i.get("causes") or []]
    if not pairs:
        return
    head = ["Incident", "Window (UTC)", "Cause", "Verdict", "When (UTC)", "Why"]
    kept = [row(i, c, _first_sentence(c.get("reason"))) for i, c in pairs if c["verdict"] in ("confirmed", "inferred")]
    excluded = [row(i, c, _first_sentence(c.get("reason"))) for i, c in pairs if c["verdict"] == "excluded"]
    open_ = [f"{e(i['id'])}: undetermined (no source covers the window either way): "
             + e(", ".join(c.get("title") or c["kind"] for c in i.get("causes") or [] if c["verdict"] == "undetermined"))
             for i in incidents if any(c["verdict"] == "undetermined" for c in i.get("causes") or [])]
    out.append(("causes", [f.h("Causes checked")] + (f.table(head, kept) if kept else []) + [""] + open_))
    if excluded:  # the table's header goes with the excluded rows
        out.append(("excluded-causes", [""] + f.table(head, excluded)))
    out.append(("causes", [""]))
    if excluded:
        out.append(("excluded-note", [f"({count_of(len(excluded), 'cause')} excluded by the evidence {'is' if len(excluded) == 1 else 'are'} left out here.)", ""]))
    contra = [f"Sources contradict each other ({e(i['id'])}, {e(c['kind'])}): {e('; '.join(c['contradictions']))}"
              for i in incidents for c in i.get("causes") or [] if c.get("contradictions")]
    if contra:
        out.append(("contradictions", contra + [""]))


def _exposure(out: list, a: dict, f) -> None:
    e, x = f.esc, a.get("exposure") or {}
    if not x.get("assessed"):
        out.append(("exposure", [f.h("Exposure"), f"Not assessed: {e(x.get('reason'))}.", ""]))
        return
    out.append(("exposure", [f.h("Exposure"), e(x.get("verdict"))]))
    lines = []
    for c in x.get("containers") or []:
        if c.get("gpu_injection") == "none":
            continue
        broken = ("yes (" + c["broken_basis"] + ")" if c.get("broken_basis") else "yes") if c.get("broken") else "no"
        basis = f" ({e(c['cgroup_driver_basis'])})" if c.get("cgroup_driver_basis") else ""
        lines.append(f"- {e(c.get('namespace') or '')}/{e(c.get('pod') or c.get('id'))}: GPU via {e(c['gpu_injection'])}, "
                     f"cgroup driver {e(c.get('cgroup_driver') or 'unknown')}{basis}, at risk: "
                     f"{'yes' if c.get('at_risk') else 'no'}, broken: {e(broken)}")
    lines += [f"Note: {e(n)}" for n in x.get("notes") or []]
    out.append(("containers", lines))
    out.append(("exposure", [""]))


def _host_gpu(out: list, a: dict, f) -> None:
    """The host's driver and the Xids by GPU, when the bundle shows any."""
    e, h = f.esc, a.get("host_gpu") or {}
    if not (h.get("collected") or h.get("gpus") or h.get("xids_unplaced")):
        return
    d = h.get("driver") or {}
    match = {True: "they match", False: "they DIFFER"}.get(d.get("match"), "match unknown")
    lines = [f.h("Host GPU state"), f"Driver: module {e(d.get('version') or 'unknown')}, libraries "
             f"{e(', '.join(d.get('userspace') or []) or 'unknown')}: {match}."]
    for g in h.get("gpus") or []:
        xids = ", ".join(f"Xid {x['xid']} {x.get('mnemonic') or ''} x{x['count']} ({x['scope']})" for x in g.get("xids") or [])
        lines.append(f"- GPU {e(g.get('pci'))} {e(g.get('uuid') or '')}: {'fell off the bus; ' if g.get('lost') else ''}"
                     f"{e(xids) or 'no Xid logged'}")
    out.append(("host-gpu", lines + [""]))


def _other_failures(out: list, a: dict, f) -> None:
    e = f.esc
    for n, s in enumerate(a.get("symptoms") or []):
        ev = (s.get("evidence") or [{}])[0]
        where = e(ev.get("artifact") or "-") + (f":{ev['line']}" if ev.get("line") else "")
        head = ([f.h("Other GPU failures seen"), "Each is its own failure, not the EPERM class above; its checks are read-only."]
                if n == 0 else [])
        out.append(("other-failures", head + [
            f"- {f.b(e(s['title']))} ({e(s['class'])}): {s['count']} line{'s' if s['count'] != 1 else ''}, "
            f"{e(s.get('first'))} .. {e(s.get('last'))}; first seen {where}. {e(s['remedy'].get('what'))}"]))
        out.append(("checks", [f"  - {f.mono(c.replace('`', chr(39)).replace('}', ')'))}" for c in s["remedy"].get("check", [])[:3]]))
    if a.get("symptoms"):
        out.append(("other-failures", [""]))


def _gap(g: dict, f) -> str:
    e, cov = f.esc, g.get("covers") or {}
    holes = "; holes: " + ", ".join(f"{e(h['start'][:10])} .. {e(h['end'][:10])}" for h in g["holes"]) if g.get("holes") else ""
    span = (f"{e(to_second(cov.get('start')) or 'its first line')} .. {e(to_second(cov.get('end')) or 'collection')}"
            if cov.get("start") or cov.get("end") else "no data")
    return f"- {e(g['source'])}: {span} ({e(g.get('reason'))}){holes}"


def _remedies(out: list, a: dict, f) -> None:
    e, x = f.esc, a.get("exposure") or {}
    if not x.get("assessed") or not x.get("remedies"):
        return
    lines = [f.h("Remedies")]
    st = x.get("stack")
    if st:
        lines.append(f"Stack: engine {e(st.get('engine') or 'unknown')}, device plugin "
                     f"{e(st.get('device_plugin') or 'unknown')}, driver root {e(st.get('driver_root') or 'unknown')}.")
    p = x.get("remedy_plan") or {"fix": None, "then": x["remedies"], "others": []}
    for n, r in enumerate(([p["fix"]] if p.get("fix") else []) + list(p.get("then") or []), 1):
        lines += ["", f"{n}. {f.b(e(r['what']))} (for {e(r.get('stack') or 'any')})"
                  + (f". Needs: {e(r['needs'])}" if r.get("needs") else "")
                  + (f". Breaks: {e(r['breaks'])}" if r.get("breaks") else "")]
        lines += f.code(r["change"]) if r.get("change") else []
        lines += [f"Not in a command: {e(h)}" for h in r.get("held_back") or []]
    if p.get("others"):
        lines += ["", "Other remedies (instead of the first; report.html has their commands):"]
        lines += [f"- {f.b(e(r['what']))}: {e(r['when'])}" for r in p["others"]]
    lines += ["", f.h("How to verify the fix"),
              "After the remedies, on the node (it runs systemctl daemon-reload on purpose and checks that "
              "every GPU container still opens its devices; exit 0 fixed, 4 still exposed):"]
    lines += f.code("sudo gpu-forensics drill --yes-reload-systemd")
    out.append(("remedies", lines))
