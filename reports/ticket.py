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

#: the droppable sections, first dropped first
DROP_ORDER = ("alerts", "excluded-causes", "containers", "checks", "causes", "contradictions")

_MD_SPECIAL = re.compile(r"([\\<>\[\]|`])")
_JIRA_SPECIAL = re.compile(r"([\\\[\]|{}*_+^~!#]|(?<!\S)-)")
_LINE_BREAKS = re.compile(r"[\r\n\x0b\x0c\x85\u2028\u2029]+")


def md(value) -> str:
    """Evidence text made inert in Markdown: a backslash, ``<``, ``>``, ``[``, ``]``, ``|`` and backticks
    are escaped with a backslash, so no HTML tag, link, table cell or code span can be opened from the
    evidence, and line breaks become spaces, so no heading, list or block can be started. ``None``
    becomes the empty string."""
    if value is None:
        return ""
    return _MD_SPECIAL.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(value)))


def jira(value) -> str:
    """Evidence text made inert in Jira wiki markup: the characters that open a link, table cell, macro
    or text effect (``[ ] | { } * _ + ^ ~ ! # -`` and the backslash) get a backslash; line breaks become
    spaces. ``None`` becomes ``""``."""
    if value is None:
        return ""
    return _JIRA_SPECIAL.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(value)))


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
                         f"Collected {e(a.get('collected_at'))}, node zone {e((a.get('timezone') or {}).get('name'))}.", ""]))
    if a.get("red_flags"):
        out.append(("red-flags", [f.h("Red flags: forged journal lines")] + [
            f"- {e(r['at'])}: someone wrote as {e(r['claim'])} ({e(r.get('claimed_identifier') or '-')}"
            f"\\[{e(r.get('claimed_pid') or '-')}\\]) but journald recorded _PID={e(r['pid'])} "
            f"_COMM={e(r.get('comm') or '-')} _UID={e(r['uid'])} _TRANSPORT={e(r.get('transport') or '-')}: "
            f"{e(r.get('message'))} (never counted as evidence)" for r in a["red_flags"]] + [""]))
    v = [f.h("Verdicts")]
    if a.get("headline"):
        v += ["", f.b(e(a["headline"]["text"])), ""]
    v += [f"- {e(s)}" for s in a.get("verdicts") or []] or ["- No incident found."]
    out.append(("verdicts", v + [""]))
    incidents = a.get("incidents") or []
    if incidents:
        out.append(("symptoms", [f.h("Symptoms")] + [f"- {e(i['id'])}: {e(i.get('symptom'))}" for i in incidents] + [""]))
    _causes(out, incidents, f)
    _exposure(out, a, f)
    _other_failures(out, a, f)
    audit = (a.get("metrics") or {}).get("alert_audit") or {}
    if (a.get("metrics") or {}).get("collected") and audit.get("audited"):
        out.append(("alerts", [f.h("Alerts"), f"{e(audit.get('summary'))} Suggested rules: "
                               f"{f.mono('gpu-alerts.rules.yml')} beside the report.", ""]))
    out.append(("gaps", [f.h("Evidence gaps")] + [_gap(g, f) for g in a.get("gaps") or []] + [""]))
    _remedies(out, a, f)
    return out


def _causes(out: list, incidents: list[dict], f) -> None:
    e = f.esc
    rows = [(c["verdict"], [e(i["id"]) + (f" {e(i['label'])}" if i.get("label") else ""),
                            f"{e(i['window']['start'])} .. {e(i['window']['end'])}", e(c["kind"]),
                            f.b(e(c["verdict"])), e((c.get("at") or "-")[:19])])
            for i in incidents for c in i.get("causes") or []]
    if not rows:
        return
    head = ["Incident", "Window (UTC)", "Cause", "Verdict", "When (UTC)"]
    kept = [r for verdict, r in rows if verdict != "excluded"]
    excluded = [r for verdict, r in rows if verdict == "excluded"]
    out.append(("causes", [f.h("Causes")] + (f.table(head, kept) if kept else [])))
    if excluded:  # the table's header goes with the excluded rows when no other row holds it
        out.append(("excluded-causes", f.table(head, excluded)[0 if not kept else -len(excluded):]))
    out.append(("causes", [""]))
    if excluded:
        out.append(("excluded-note", [f"({len(excluded)} causes excluded by the evidence are left out here.)", ""]))
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
    return (f"- {e(g['source'])}: {e((cov.get('start') or 'nothing')[:19])} .. {e((cov.get('end') or 'nothing')[:19])} "
            f"({e(g.get('reason'))}){holes}")


def _remedies(out: list, a: dict, f) -> None:
    e, x = f.esc, a.get("exposure") or {}
    if not x.get("assessed") or not x.get("remedies"):
        return
    lines = [f.h("Remedies")]
    st = x.get("stack")
    if st:
        lines.append(f"Stack: engine {e(st.get('engine') or 'unknown')}, device plugin "
                     f"{e(st.get('device_plugin') or 'unknown')}, driver root {e(st.get('driver_root') or 'unknown')}.")
    for n, r in enumerate(x["remedies"], 1):
        lines += ["", f"{r.get('order') or n}. {f.b(e(r['what']))} (for {e(r.get('stack') or 'any')})"
                  + (f". Needs: {e(r['needs'])}" if r.get("needs") else "")
                  + (f". Breaks: {e(r['breaks'])}" if r.get("breaks") else "")]
        lines += f.code(r["change"])
    lines += ["", f.h("How to verify the fix"),
              "After the remedies, on the node (it runs systemctl daemon-reload on purpose and checks that "
              "every GPU container still opens its devices; exit 0 fixed, 4 still exposed):"]
    lines += f.code("sudo gpu-forensics drill --yes-reload-systemd")
    out.append(("remedies", lines))
