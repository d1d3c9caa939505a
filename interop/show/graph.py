"""``xla-show graph PROGRAM -o out.html``: the program graph as one self-contained HTML page.

The page needs no network and opens from disk. Each function is a collapsible section holding a table of its
ops in program order: results, op, operands (links to the rows that define them, with their shapes and
layouts: the graph's edges), result types, source location and the op's cost (XLA's cost analysis,
:mod:`passes.cost_analysis`); ops with regions (loops, conditionals, reductions) nest their regions as
collapsible sub-tables, calls link to the function called. A search box filters every row by text (op,
value, shape, location) and opens the sections holding matches. A table, not a graph layout engine, so that
programs of 10,000 ops load in a moment; functions of up to :data:`SVG_MAX_OPS` ops are also drawn as a small
layered data-flow picture (SVG).

Executor view: the fusion groups and compiled loops are found as the executor forms them, by the executor's
own functions (:func:`lowering.executor.fusion_plan.plan` with row reductions, :func:`lowering.executor.compiled_loops.loop_source`)
on the program the executor runs (:func:`passes.pipelines.prepare_for_execution`). When that program is the
given one, the ops are marked in the tables (a coloured bar and a ``fusion N`` badge, ``compiled loop`` /
``interpreted loop``); when the executor's pipeline rewrote the program, the ops it kept (matched in order by
name and types) are marked in the tables and the executor's whole program follows, collapsed, with the marks.
"""

from __future__ import annotations

from html import escape

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation

from xla_dialect.errors import XlaError
from xla_dialect.shape import format_shape

SVG_MAX_OPS = 150
"""Functions with at most this many ops (at their top level) also get a data-flow picture."""

_GROUP_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")


def _type_text(type_) -> str:
    try:
        return format_shape(type_)
    except Exception:  # noqa: BLE001 - non-XLA types print as MLIR
        return str(type_)


class _Names:
    """Values and ops named as the printed program names them."""

    def __init__(self, module: ModuleOp):
        from passes.layouts import _value_table

        self.table = _value_table(module)
        self.types: dict[int, str] = {}

    def value(self, v) -> str:
        """``%N`` of a value."""
        return self.table.get(v, "%?").split(" ", 1)[0]

    def type(self, t) -> str:
        """XLA shape text of a type (memoized)."""
        key = id(t)
        text = self.types.get(key)
        if text is None:
            text = self.types[key] = _type_text(t)
        return text


def executor_view(module: ModuleOp) -> dict:
    """The executor's fusion groups and loops of ``module``: ``{"same_program": bool, "groups": [...],
    "loops": [...], "note": str}``. Groups and loops hold the ops of the program the executor runs (the given
    module's own ops when ``same_program``). Found with the executor's functions, nothing is compiled."""
    from lowering.executor.compiled_loops import Ineligible, loop_source
    from lowering.executor.fusion_plan import plan
    from passes.pipelines import prepare_for_execution
    from xla_dialect.ops.control_flow import WhileOp
    from xla_dialect.types import numpy_dtype

    try:
        prepared = prepare_for_execution(module)
    except XlaError as e:
        return {"same_program": False, "groups": [], "loops": [], "note": f"the executor's pipeline refused it: {e}"}
    functions = {f.sym_name.data: f for f in prepared.ops if isinstance(f, func.FuncOp)}
    groups, loops = [], []
    for fn in functions.values():
        for op in fn.walk():
            for region in op.regions:
                for block in region.blocks:
                    for g in plan(block, row_reductions=True):
                        groups.append({"function": fn.sym_name.data, "ops": list(g.members)})
            if isinstance(op, WhileOp):
                try:
                    loop_source(op, functions, numpy_dtype)
                    loops.append({"function": fn.sym_name.data, "op": op, "compiled": True, "reason": ""})
                except Ineligible as e:
                    loops.append({"function": fn.sym_name.data, "op": op, "compiled": False,
                                  "reason": str(e) or "uses an op compiled loops do not cover"})
                except Exception as e:  # noqa: BLE001 - anything else keeps the loop interpreted, as the executor does
                    loops.append({"function": fn.sym_name.data, "op": op, "compiled": False,
                                  "reason": f"{type(e).__name__}: {e}"})
    # The pipeline works on a copy; when the copy holds the same ops (names, types, order), its groups and
    # loops are the given module's ops at the same positions.
    same = _same_ops(module, prepared)
    if same and prepared is not module:
        mapping = {id(a): b for a, b in zip(prepared.walk(), module.walk())}
        for g in groups:
            g["ops"] = [mapping[id(op)] for op in g["ops"]]
        for loop in loops:
            loop["op"] = mapping[id(loop["op"])]
    # Otherwise the ops the pipeline kept are matched to the given ones (the longest matching runs of op
    # names and result types, in order), so that the tables can mark them too.
    matched = {} if same else _match_ops(prepared, module)
    note = ("the executor runs this program as given" if same else
            "the executor's pipeline (broadcasts made explicit, XLA's float rewrites, FMA contraction, calls "
            "inlined) rewrote the program: the tables mark the ops it kept; 'as the executor runs it' at the "
            "end shows its whole program")
    return {"same_program": same, "groups": groups, "loops": loops, "note": note, "prepared": prepared,
            "matched": matched}


def _match_ops(prepared: ModuleOp, module: ModuleOp) -> dict[int, Operation]:
    """id of an op of ``prepared`` -> the op of ``module`` it is a copy of, for the runs of ops (name, operand
    count, result types) the two modules share in order (difflib's matching blocks)."""
    import difflib

    def key(op):
        return (op.name, len(op.operands), tuple(r.type for r in op.results))

    a, b = list(prepared.walk()), list(module.walk())
    matcher = difflib.SequenceMatcher(a=[key(op) for op in a], b=[key(op) for op in b], autojunk=False)
    matched = {}
    for i, j, n in matcher.get_matching_blocks():
        for k in range(n):
            matched[id(a[i + k])] = b[j + k]
    return matched


def _same_ops(a: ModuleOp, b: ModuleOp) -> bool:
    """Whether two modules hold the same ops in the same order (names, operand counts, result types)."""
    if a is b:
        return True
    ops_a, ops_b = list(a.walk()), list(b.walk())
    if len(ops_a) != len(ops_b):
        return False
    for x, y in zip(ops_a, ops_b):
        if (x.name != y.name or len(x.operands) != len(y.operands)
                or [r.type for r in x.results] != [r.type for r in y.results]):
            return False
    return True


def graph_html(module: ModuleOp, fusion: bool = True, title: str = "program") -> str:
    """The HTML page of ``module`` (see the module docstring). ``fusion=False`` leaves the executor view out."""
    if not isinstance(module, ModuleOp):
        raise XlaError(f"graph: expected a builtin.module, got {type(module).__name__}")
    from passes.cost_analysis import cost_analysis

    names = _Names(module)
    try:
        report = cost_analysis(module)
        costs = {id(c.op): c for c in report.ops}
        totals = report.totals
        entry = report.entry
    except XlaError as e:
        costs, totals, entry = {}, {"note": str(e)}, ""
    del cost_analysis
    view = executor_view(module) if fusion else None
    group_of: dict[int, int] = {}
    loop_of: dict[int, dict] = {}
    if view:
        here = (lambda op: op) if view["same_program"] else (lambda op: view["matched"].get(id(op)))
        for i, g in enumerate(view["groups"]):
            for op in g["ops"]:
                if here(op) is not None:
                    group_of[id(here(op))] = i
        for loop in view["loops"]:
            if here(loop["op"]) is not None:
                loop_of[id(here(loop["op"]))] = loop
    writer = _Writer(names, costs, group_of, loop_of)
    functions = [f for f in module.ops if isinstance(f, func.FuncOp)]
    n_ops = sum(1 for f in functions for op in f.walk() if op is not f)
    body = []
    body.append(f"<h1>{escape(title)}</h1>")
    summary = [f"{len(functions)} functions, {n_ops:,} ops"]
    if "flops" in totals or "bytes accessed" in totals:
        summary.append(f"entry @{escape(entry)}: flops {totals.get('flops', 0):,.0f}, transcendentals "
                       f"{totals.get('transcendentals', 0):,.0f}, bytes accessed {totals.get('bytes accessed', 0):,.0f} "
                       "(XLA's cost analysis; loops count one iteration)")
    elif "note" in totals:
        summary.append(f"cost analysis unavailable: {escape(totals['note'])}")
    if view is not None:
        n_loops = sum(1 for loop in view["loops"] if loop["compiled"])
        summary.append(f"executor: {len(view['groups'])} fusion groups, {n_loops} of {len(view['loops'])} loops "
                       f"compiled; {escape(view['note'])}")
    body.append("<p class='summary'>" + "<br>".join(summary) + "</p>")
    body.append("<div class='bar'><input id='q' type='search' placeholder='search ops, values, shapes, locations' "
                "size='48' autofocus> <button id='open'>expand all</button> <button id='close'>collapse all</button> "
                "<span id='count'></span></div>")
    for fn in functions:
        body.append(writer.function(fn))
    if view is not None and not view["same_program"]:
        body.append(_executor_section(view, _costs))
    return _PAGE.format(title=escape(title), style=_STYLE, body="\n".join(body), script=_SCRIPT)


def _costs(module: ModuleOp) -> dict:
    """op id -> its :class:`passes.cost_analysis.OpCost` ({} when the analysis refuses the module)."""
    from passes.cost_analysis import cost_analysis

    try:
        return {id(c.op): c for c in cost_analysis(module).ops}
    except XlaError:
        return {}


def write_graph(module: ModuleOp, path: str, fusion: bool = True, source: str | None = None) -> str:
    """Write :func:`graph_html` of ``module`` to ``path``; returns the path."""
    html = graph_html(module, fusion=fusion, title=source or "program")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(html)
    except OSError as e:
        raise XlaError(f"{path}: cannot write it: {e.strerror or e}") from None
    return path


class _Writer:
    """Emits the tables of functions and regions."""

    def __init__(self, names: _Names, costs, group_of, loop_of, prefix: str = "", open_: bool = True):
        self.names = names
        self.costs = costs
        self.group_of = group_of
        self.loop_of = loop_of
        self.prefix = prefix
        self.open = open_

    def function(self, fn: func.FuncOp) -> str:
        """The collapsible section of one function: signature, picture (small functions), op table."""
        name = fn.sym_name.data
        block = fn.body.block
        args = ", ".join(f"<span id='{self.prefix}v-{escape(self.names.value(a))}-{escape(name)}'>{escape(self.names.value(a))}"
                         f"</span>: {escape(self.names.type(a.type))}" for a in block.args)
        outs = ", ".join(escape(self.names.type(t)) for t in fn.function_type.outputs)
        count = sum(1 for op in fn.walk() if op is not fn)
        flops = sum(c.flops for c in (self.costs.get(id(op)) for op in block.ops) if c is not None)
        state = " open" if self.open else ""
        parts = [f"<details class='fn' id='{self.prefix}fn-{escape(name)}'{state}><summary><b>func @{escape(name)}</b>({args}) "
                 f"&#8594; ({outs}) <span class='dim'>{count:,} ops; flops {flops:,.0f}</span></summary>"]
        ops = list(block.ops)
        if len(ops) <= SVG_MAX_OPS:
            parts.append(_dataflow_svg(block, self.names))
        parts.append(self.table(block, name))
        parts.append("</details>")
        return "\n".join(parts)

    def table(self, block: Block, fname: str) -> str:
        """The op table of a block."""
        rows = ["<table><thead><tr><th>results</th><th>op</th><th>operands (edges: value: shape{layout})</th>"
                "<th>result types</th><th>location</th><th class='n'>flops</th><th class='n'>transc.</th>"
                "<th class='n'>bytes</th></tr></thead><tbody>"]
        for op in block.ops:
            rows.append(self.row(op, fname))
        rows.append("</tbody></table>")
        return "\n".join(rows)

    def row(self, op: Operation, fname: str) -> str:
        """One op's row, and a nested row holding its regions' tables."""
        names = self.names
        p = self.prefix
        results = ", ".join(f"<span class='def' id='{p}v-{escape(names.value(r))}-{escape(fname)}'>"
                            f"{escape(names.value(r))}</span>" for r in op.results)
        operands = ", ".join(f"<a href='#{p}v-{escape(names.value(o))}-{escape(fname)}'>{escape(names.value(o))}</a>"
                             f"<span class='t'>: {escape(names.type(o.type))}</span>" for o in op.operands)
        types = ", ".join(escape(names.type(r.type)) for r in op.results)
        loc = op.attributes.get("loc")
        loc = escape(getattr(loc, "data", "")) if loc is not None else ""
        cost = self.costs.get(id(op))
        cells = ["", "", ""] if cost is None else [f"{cost.flops:,.0f}", f"{cost.transcendentals:,.0f}",
                                                     f"{cost.bytes_accessed:,.0f}"]
        badges, style = [], ""
        g = self.group_of.get(id(op))
        if g is not None:
            colour = _GROUP_COLOURS[g % len(_GROUP_COLOURS)]
            style = f" style='border-left:5px solid {colour}'"
            badges.append(f"<span class='badge' style='background:{colour}'>fusion {g}</span>")
        loop = self.loop_of.get(id(op))
        if loop is not None:
            badges.append("<span class='badge loop'>compiled loop</span>" if loop["compiled"] else
                          f"<span class='badge interp' title='{escape(loop['reason'])}'>interpreted loop</span>")
        callee = getattr(op, "callee", None) or op.properties.get("decomposition")
        op_text = escape(op.name)
        if callee is not None and hasattr(callee, "string_value"):
            target = callee.string_value()
            op_text += f" <a href='#{p}fn-{escape(target)}'>@{escape(target)}</a>"
        extra = ""
        if op.regions:
            regions = []
            for i, region in enumerate(op.regions):
                for block in region.blocks:
                    args = ", ".join(f"<span class='def' id='{p}v-{escape(names.value(a))}-{escape(fname)}'>"
                                     f"{escape(names.value(a))}</span>: {escape(names.type(a.type))}"
                                     for a in block.args)
                    n = sum(1 for _ in block.walk())
                    regions.append(f"<details class='region'><summary>region {i} ({args}) "
                                   f"<span class='dim'>{n} ops</span></summary>{self.table(block, fname)}</details>")
            extra = f"<tr class='nest'><td></td><td colspan='7'>{''.join(regions)}</td></tr>"
        return (f"<tr class='op'{style}><td>{results}</td><td>{op_text} {''.join(badges)}</td><td>{operands}</td>"
                f"<td>{types}</td><td class='loc'>{loc}</td><td class='n'>{cells[0]}</td><td class='n'>{cells[1]}</td>"
                f"<td class='n'>{cells[2]}</td></tr>{extra}")


def _executor_section(view: dict, costs_of) -> str:
    """The program the executor runs (after its pipeline), its functions collapsed, with the fusion groups and
    loops marked as in the main tables."""
    prepared = view["prepared"]
    group_of = {id(op): i for i, g in enumerate(view["groups"]) for op in g["ops"]}
    loop_of = {id(loop["op"]): loop for loop in view["loops"]}
    writer = _Writer(_Names(prepared), costs_of(prepared), group_of, loop_of, prefix="x-", open_=False)
    parts = ["<details class='fn executor' id='executor' open><summary><b>as the executor runs it</b> "
             f"<span class='dim'>{escape(view['note'])}</span></summary>"]
    parts.extend(writer.function(f) for f in prepared.ops if isinstance(f, func.FuncOp))
    parts.append("</details>")
    return "\n".join(parts)


_SVG_IDS = iter(range(1 << 62))


def _dataflow_svg(block: Block, names: _Names) -> str:
    """A layered drawing of a block's top-level data flow: arguments on the left, each op one layer right of
    the latest op it reads; edges labelled with the value's shape."""
    ops = [op for op in block.ops]
    if not ops:
        return ""
    layer: dict[int, int] = {}
    position: dict[int, tuple[int, int]] = {}
    producer: dict[int, object] = {}
    for a in block.args:
        producer[id(a)] = ("arg", a)
    for op in ops:
        for r in op.results:
            producer[id(r)] = ("op", op)
    columns: dict[int, list] = {0: [("arg", a) for a in block.args]}
    for op in ops:
        deps = []
        for inner in op.walk():
            for o in inner.operands:
                p = producer.get(id(o))
                if p is not None and p[0] == "op" and p[1] is not op:
                    deps.append(layer[id(p[1])])
        layer[id(op)] = 1 + max(deps, default=0)
        columns.setdefault(layer[id(op)], []).append(("op", op))
    box_w, box_h, gap_x, gap_y = 150, 30, 70, 14
    for c, items in columns.items():
        for r, (_, item) in enumerate(items):
            position[id(item)] = (20 + c * (box_w + gap_x), 20 + r * (box_h + gap_y))
    width = 40 + (max(columns) + 1) * (box_w + gap_x)
    height = 40 + max(len(v) for v in columns.values()) * (box_h + gap_y)
    marker = f"ah{next(_SVG_IDS)}"
    out = [f"<svg class='flow' xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' font-family='monospace' font-size='11'>",
           f"<defs><marker id='{marker}' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='6' markerHeight='6' "
           "orient='auto'><path d='M0 0L10 5L0 10z' fill='#888'/></marker></defs>"]
    for op in ops:
        x2, y2 = position[id(op)]
        seen = set()
        for inner in op.walk():
            for o in inner.operands:
                p = producer.get(id(o))
                if p is None or p[1] is op or id(o) in seen:
                    continue
                seen.add(id(o))
                x1, y1 = position[id(p[1])]
                out.append(f"<path class='edge' d='M{x1 + box_w} {y1 + box_h / 2}L{x2} {y2 + box_h / 2}' "
                           f"stroke='#999' fill='none' marker-end='url(#{marker})'><title>{escape(names.value(o))}: "
                           f"{escape(names.type(o.type))}</title></path>")
                mx, my = (x1 + box_w + x2) / 2, (y1 + y2) / 2 + box_h / 2 - 3
                out.append(f"<text x='{mx}' y='{my}' text-anchor='middle' fill='#555' font-size='9'>"
                           f"{escape(names.type(o.type))[:28]}</text>")
    for kind, item in [*columns[0], *[("op", op) for op in ops]]:
        x, y = position[id(item)]
        if kind == "arg":
            label, fill = f"{names.value(item)} (arg)", "#eef"
        else:
            label = item.name.removeprefix("hlo.")
            if item.results:
                label = f"{names.value(item.results[0])} {label}"
            fill = "#fff7e0" if item.regions else "#f4f4f4"
        out.append(f"<g class='node'><rect x='{x}' y='{y}' width='{box_w}' height='{box_h}' rx='5' fill='{fill}' "
                   f"stroke='#666'/><text x='{x + 6}' y='{y + 19}'>{escape(label[:22])}</text></g>")
    out.append("</svg>")
    return "\n".join(out)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1em;color:#222}
h1{font-size:1.2em;font-family:monospace}
.summary{font-size:.9em;color:#333}
.bar{position:sticky;top:0;background:#fff;padding:.4em 0;border-bottom:1px solid #ddd;z-index:2}
table{border-collapse:collapse;font-family:monospace;font-size:12px;margin:.3em 0 .6em 0}
th{text-align:left;background:#f0f0f0;position:sticky;top:2.4em}
td,th{padding:1px 6px;vertical-align:top;border-bottom:1px solid #eee}
td.n,th.n{text-align:right}
td.loc{color:#777}
.t{color:#777}
.dim{color:#777;font-weight:normal}
details.fn{margin:.6em 0;border:1px solid #ccc;border-radius:4px;padding:.2em .5em}
details.region{margin-left:1em}
summary{cursor:pointer;font-family:monospace}
.badge{color:#fff;border-radius:3px;padding:0 4px;font-size:10px}
.badge.loop{background:#2a7}
.badge.interp{background:#999}
a{color:#1558b0;text-decoration:none}
a:hover{text-decoration:underline}
.hit{background:#fff3a0}
svg.flow{display:block;margin:.3em 0;max-width:100%;height:auto;border:1px solid #eee}
"""

_SCRIPT = """
(function(){
  var q=document.getElementById('q'), count=document.getElementById('count');
  var rows=Array.prototype.slice.call(document.querySelectorAll('tr.op'));
  var texts=rows.map(function(r){return r.textContent.toLowerCase();});
  var timer=null;
  function apply(){
    var s=q.value.trim().toLowerCase(), n=0;
    for(var i=0;i<rows.length;i++){
      var hit=!s||texts[i].indexOf(s)>=0;
      rows[i].style.display=hit?'':'none';
      rows[i].classList.toggle('hit',!!s&&hit);
      if(s&&hit){n++;var p=rows[i].parentElement;while(p){if(p.tagName==='DETAILS')p.open=true;p=p.parentElement;}}
    }
    var nests=document.querySelectorAll('tr.nest');
    for(var j=0;j<nests.length;j++){nests[j].style.display=(!s||nests[j].querySelector('tr.hit'))?'':'none';}
    count.textContent=s?(n+' of '+rows.length+' ops match'):(rows.length+' ops');
  }
  q.addEventListener('input',function(){clearTimeout(timer);timer=setTimeout(apply,120);});
  document.getElementById('open').onclick=function(){document.querySelectorAll('details').forEach(function(d){d.open=true;});};
  document.getElementById('close').onclick=function(){document.querySelectorAll('details').forEach(function(d){d.open=false;});};
  document.addEventListener('click',function(e){
    var a=e.target.closest&&e.target.closest('a[href^="#"]'); if(!a)return;
    var t=document.getElementById(a.getAttribute('href').slice(1)); if(!t)return;
    var p=t.parentElement;while(p){if(p.tagName==='DETAILS')p.open=true;p=p.parentElement;}
  });
  apply();
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{style}</style></head>
<body>
{body}
<script>{script}</script>
</body></html>
"""

__all__ = ["SVG_MAX_OPS", "executor_view", "graph_html", "write_graph"]
