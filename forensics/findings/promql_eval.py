"""Would a PromQL expression return anything in a given failure state? An abstract evaluation over the
expression's syntax tree (the ``promql-parser`` library: Prometheus v2.45's grammar).

A state says, for each kind of selector, whether its series exist and what values they hold:

- ``dcgm_absent``: dcgm-exporter lost the GPU; every ``DCGM_FI_*`` series is gone, its target's ``up``
  stays 1 and the node still advertises its GPUs (``kube_node_status_capacity|allocatable`` of the GPU
  resource > 0), as in the seed case's July (docs/sources.md "Prometheus", "DCGM exporter and kube-state-metrics");
- ``capacity_zero``: the GPU resource's capacity/allocatable series exist with the value 0; whether the
  DCGM series exist then is not known.

Every other series is taken to exist with unknown values. Each node evaluates to a :class:`Value`:
``empty`` (returns nothing), ``some`` (returns series, all with values in ``[lo, hi]``), ``unknown``
(cannot tell from the expression: the answer depends on values or label matching), ``scalar`` or ``string``, with
a ``why`` naming the subexpression that decided it. The PromQL semantics used (docs/querying/
operators.md, functions.md): an operator or aggregation over an empty vector returns nothing;
``absent()`` returns 1 exactly when its argument is empty; a comparison without ``bool`` keeps the
series for which it holds; ``or`` is empty only when both sides are; ``unless`` keeps its left side when
the right is empty. A recording rule's name evaluates its recorded expression (to :data:`DEPTH`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import promql_parser as pp

DCGM_ABSENT, CAPACITY_ZERO = "dcgm_absent", "capacity_zero"
CAPACITY_NAMES = ("kube_node_status_capacity", "kube_node_status_allocatable")
DEPTH = 5
INF = math.inf
#: functions whose result keeps the values of their vector argument (index of that argument)
KEEPS_VALUES = {"label_replace": 0, "label_join": 0, "sort": 0, "sort_desc": 0, "last_over_time": 0,
                "max_over_time": 0, "min_over_time": 0, "avg_over_time": 0, "quantile_over_time": 1}
KEEPS_AGG = ("min", "max", "avg", "topk", "bottomk", "quantile")
COMPARE = ("==", "!=", "<", "<=", ">", ">=")
FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class Value:
    """The abstract result of a subexpression: ``kind`` (``empty``, ``some``, ``unknown``, ``scalar``, ``string``),
    the value interval ``[lo, hi]`` of every series (or of the scalar), and ``why`` (one clause)."""

    kind: str
    lo: float = -INF
    hi: float = INF
    why: str = ""


def parse(query: str):
    """``(expr, None)``, or ``(None, the parser's message)`` when ``query`` is not valid PromQL."""
    try:
        return pp.parse(query), None
    except ValueError as e:
        return None, str(e).strip() or "parse error"


def text(node) -> str:
    """PromQL text of a node, without the empty ``{}`` the library prints after a bare metric name."""
    return str(node).replace("{}", "")


def selector_kind(sel, resource: str) -> str:
    """What a vector selector selects: ``dcgm`` (DCGM_FI_* series), ``gpu-capacity`` (capacity or
    allocatable of ``resource``), ``capacity-mixed`` (capacity/allocatable without a matcher that pins the
    resource: GPU series among others), ``dcgm-up`` (``up`` of a target whose job or instance names dcgm),
    ``other``. The name is the selector's or its ``__name__`` matcher's; a label value is never a name."""
    ms = sel.matchers.matchers
    name = sel.name or next((m.value for m in ms if m.name == "__name__" and str(m.op) == "MatchOp.Equal"), None)
    if name is None:
        pat = next((m.value for m in ms if m.name == "__name__" and str(m.op) == "MatchOp.Re"), None)
        name = "DCGM_FI_" if pat and pat.startswith("DCGM_FI_") else None
    if name and name.startswith("DCGM_FI_"):
        return "dcgm"
    if name in CAPACITY_NAMES:
        res = [m for m in ms if m.name == "resource"]
        if not all(_matches(m, resource) for m in res):
            return "other"
        pinned = any(str(m.op) == "MatchOp.Equal" or (str(m.op) == "MatchOp.Re" and m.value in (resource, re.escape(resource)))
                     for m in res)
        return "gpu-capacity" if pinned else "capacity-mixed"
    if name == "up" and any("dcgm" in m.value.lower() and str(m.op) in ("MatchOp.Equal", "MatchOp.Re")
                            for m in ms if m.name in ("job", "instance", "service", "namespace")):
        return "dcgm-up"
    return "other"


def _matches(m, value: str) -> bool:
    op = str(m.op)
    if op in ("MatchOp.Re", "MatchOp.NotRe"):
        hit = re.fullmatch(m.value, value) is not None
        return hit if op == "MatchOp.Re" else not hit
    return (m.value == value) if op == "MatchOp.Equal" else (m.value != value)


def _selector(sel, state: str, resource: str) -> Value:
    kind, t = selector_kind(sel, resource), text(sel)
    if kind == "dcgm":
        if state == DCGM_ABSENT:
            return Value("empty", why=f"{t} returns nothing when the DCGM series are gone")
        return Value("unknown", why=f"whether {t} exists when GPU capacity is 0 is not known")
    if kind == "gpu-capacity":
        if state == CAPACITY_ZERO:
            return Value("some", 0, 0, f"{t} is 0")
        return Value("some", 1, INF, f"{t} stays above 0 (the node still advertises its GPUs)")
    if kind == "dcgm-up" and state == DCGM_ABSENT:
        return Value("some", 1, 1, f"{t} stays 1: the exporter still answers")
    if kind == "capacity-mixed" and state == CAPACITY_ZERO:
        return Value("some", -INF, INF, f"{t} holds other resources' series beside the GPU's 0")
    return Value("some", why=f"{t} is taken to exist, values unknown")


def _holds(v: Value, op: str, c: float) -> bool | None:
    """Does ``x op c`` hold for every value x in ``[v.lo, v.hi]`` (True), for none (False), or some?"""
    lo, hi = v.lo, v.hi
    every = {"==": lo == hi == c, "!=": c < lo or c > hi, "<": hi < c, "<=": hi <= c, ">": lo > c, ">=": lo >= c}[op]
    none = {"==": c < lo or c > hi, "!=": lo == hi == c, "<": lo >= c, "<=": lo > c, ">": hi <= c, ">=": hi < c}[op]
    return True if every else False if none else None


class Evaluator:
    """Evaluate expressions in one ``state`` (:data:`DCGM_ABSENT` or :data:`CAPACITY_ZERO`);
    ``recorded`` maps recording rule names to their parsed expression (or the parse error's text)."""

    def __init__(self, state: str, recorded: dict, resource: str = "nvidia_com_gpu"):
        self.state, self.recorded, self.resource = state, recorded, resource
        self.depth = 0

    def eval(self, node) -> Value:
        """The :class:`Value` of ``node`` (a promql_parser ``Expr``)."""
        if isinstance(node, pp.NumberLiteral):
            return Value("scalar", node.val, node.val, f"the number {text(node)}")
        if isinstance(node, pp.StringLiteral):
            return Value("string", why=f"the string {text(node)}")
        if isinstance(node, (pp.ParenExpr, pp.SubqueryExpr)):
            return self.eval(node.expr)
        if isinstance(node, pp.MatrixSelector):
            return self.eval(node.vector_selector)
        if isinstance(node, pp.UnaryExpr):
            v = self.eval(node.expr)
            return Value(v.kind, -v.hi, -v.lo, v.why)
        if isinstance(node, pp.VectorSelector):
            return self._vector(node)
        if isinstance(node, pp.Call):
            return self._call(node)
        if isinstance(node, pp.AggregateExpr):
            return self._aggregate(node)
        if isinstance(node, pp.BinaryExpr):
            return self._binary(node)
        return Value("unknown", why=f"{type(node).__name__} is not evaluated")

    def _vector(self, sel) -> Value:
        name = sel.name
        if name in self.recorded:
            body = self.recorded[name]
            if isinstance(body, str) or self.depth >= DEPTH:
                return Value("unknown", why=f"recording rule {name} not evaluated ({body if isinstance(body, str) else 'too deep'})")
            self.depth += 1
            try:
                v = self.eval(body)
            finally:
                self.depth -= 1
            why = f"recording rule {name} = {text(body)}: {v.why}"
            if v.kind == "some" and any(m.name != "__name__" for m in sel.matchers.matchers):
                return Value("unknown", why=f"{why}; the matchers of {text(sel)} may select none of it")
            return Value(v.kind, v.lo, v.hi, why)
        return _selector(sel, self.state, self.resource)

    def _call(self, c) -> Value:
        fn = c.func.name
        args = [self.eval(a) for a in c.args]
        vec = next((v for v in args if v.kind not in ("scalar", "string")), None)
        if fn in ("absent", "absent_over_time"):
            a, t = args[0], text(c.args[0])
            if a.kind == "empty":
                return Value("some", 1, 1, f"{fn}({t}) returns 1: {a.why}")
            if a.kind == "some":
                return Value("empty", why=f"{fn}({t}) returns nothing: {a.why}")
            return Value("unknown", why=f"{fn}({t}): {a.why}")
        if fn == "vector":
            return Value("some", args[0].lo, args[0].hi, f"vector({text(c.args[0])}) always returns a value")
        if fn in ("time", "scalar", "pi") or vec is None:
            return Value("scalar", why=f"{fn}() is a scalar")
        if vec.kind != "some":
            return vec
        if fn in KEEPS_VALUES and len(args) > KEEPS_VALUES[fn]:
            v = args[KEEPS_VALUES[fn]]
            return Value(v.kind, v.lo, v.hi, v.why)
        lo = 1 if fn in ("count_over_time", "present_over_time") else -INF
        hi = 1 if fn == "present_over_time" else INF
        return Value("some", lo, hi, vec.why)

    def _aggregate(self, a) -> Value:
        op = str(a.op)
        v = self.eval(a.expr)
        if v.kind != "some":
            return v
        if op == "count":
            return Value("some", 1, INF, f"count() of {text(a.expr)} is at least 1: {v.why}")
        if op == "group":
            return Value("some", 1, 1, v.why)
        if op in KEEPS_AGG:
            return Value("some", v.lo, v.hi, v.why)
        if op == "sum" and v.lo >= 0:
            return Value("some", v.lo, 0 if v.hi == 0 else INF, v.why)
        return Value("some", why=v.why)

    def _binary(self, b) -> Value:
        op = str(b.op)
        lv, rv = self.eval(b.lhs), self.eval(b.rhs)
        if op in ("and", "or", "unless"):
            return self._set_op(op, lv, rv, b)
        if lv.kind == "scalar" and rv.kind == "scalar":
            return Value("scalar", why=f"{text(b)} is a scalar")
        if op in COMPARE:
            if "scalar" in (lv.kind, rv.kind):
                vec, sc, o = (lv, rv, op) if rv.kind == "scalar" else (rv, lv, FLIP[op])
                return self._compare(vec, sc, o, b)
            empty = next((v for v in (lv, rv) if v.kind == "empty"), None)
            return empty or Value("unknown", why=f"{text(b)} compares two vectors: depends on their values")
        # arithmetic
        empty = next((v for v in (lv, rv) if v.kind == "empty"), None)
        if empty:
            return empty
        if "unknown" in (lv.kind, rv.kind):
            return next(v for v in (lv, rv) if v.kind == "unknown")
        if "scalar" in (lv.kind, rv.kind):
            vec = lv if rv.kind == "scalar" else rv
            return Value("some", why=vec.why)
        return Value("unknown", why=f"{text(b)}: the result depends on which series match")

    def _compare(self, vec: Value, sc: Value, op: str, b) -> Value:
        if vec.kind != "some":
            return vec
        ret_bool = bool(b.modifier and b.modifier.return_bool)
        held = _holds(vec, op, sc.lo) if sc.lo == sc.hi else None
        if ret_bool:
            v = {True: 1, False: 0}.get(held)
            return Value("some", 0 if v is None else v, 1 if v is None else v, vec.why)
        clause = f"'{op} {_num(sc.lo)}'" if sc.lo == sc.hi else f"'{text(b)}'"
        if held is True:
            return Value("some", vec.lo, vec.hi, f"{clause} holds: {vec.why}")
        if held is False:
            return Value("empty", why=f"{clause} does not hold: {vec.why}")
        return Value("unknown", why=f"{clause} may or may not hold: {vec.why}")

    def _set_op(self, op: str, lv: Value, rv: Value, b) -> Value:
        m = b.modifier.matching if b.modifier else None
        on_nothing = m is not None and str(m.type) == "LabelModifierType.Include" and not m.labels
        if op == "or":
            if "empty" in (lv.kind, rv.kind):
                return rv if lv.kind == "empty" else lv
            if lv.kind == rv.kind == "some":
                return Value("some", min(lv.lo, rv.lo), max(lv.hi, rv.hi), lv.why)
            if "some" in (lv.kind, rv.kind):
                return Value("some", why=(lv if lv.kind == "some" else rv).why)
            return Value("unknown", why=lv.why)
        if lv.kind == "empty":
            return lv
        if op == "and":
            if rv.kind == "empty":
                return Value("empty", why=f"the 'and' side returns nothing: {rv.why}")
            if lv.kind == rv.kind == "some" and on_nothing:
                return lv
            return Value("unknown", why=f"'and' of {text(b.lhs)} and {text(b.rhs)}: depends on which series match")
        if rv.kind == "empty":  # unless
            return Value(lv.kind, lv.lo, lv.hi, f"{lv.why}, and the 'unless' side returns nothing ({rv.why})")
        if lv.kind == rv.kind == "some" and on_nothing:
            return Value("empty", why=f"the 'unless' side returns series: {rv.why}")
        return Value("unknown", why=f"'unless' of {text(b.rhs)}: depends on which series match")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def references(node, recorded: dict, resource: str = "nvidia_com_gpu") -> set[str]:
    """The selector kinds (:func:`selector_kind`, ``other`` left out) ``node`` depends on, through
    recording rules to :data:`DEPTH`; ``unparsed-recording`` when it names a recording rule that did not parse."""
    out: set[str] = set()

    def visit(n, depth: int) -> None:
        def pre(x):
            if isinstance(x, pp.VectorSelector):
                body = recorded.get(x.name)
                if isinstance(body, str):
                    out.add("unparsed-recording")
                elif body is not None and depth < DEPTH:
                    visit(body, depth + 1)
                out.add(selector_kind(x, resource))
            return True
        pp.walk(n, pre)

    visit(node, 0)
    out.discard("other")
    return out
