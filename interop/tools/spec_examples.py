"""Run the examples of the StableHLO specification (``stablehlo-spec.md``) through the importer and the executor.

Each op's section shows examples like::

    // %lhs: [[1, 2], [3, 4]]
    // %rhs: [[5, 6], [7, 8]]
    %result = "stablehlo.add"(%lhs, %rhs) : (tensor<2x2xi32>, tensor<2x2xi32>) -> tensor<2x2xi32>
    // %result: [[6, 8], [10, 12]]

:func:`examples` reads them: the values given before the ops are the inputs,
those given after are the expected results. :func:`run_example` makes the ops
the body of a function whose arguments are the inputs (their types are read
from the signatures of the generic-form ops that use them) and whose results
are the expected values, imports it (ops newer than jaxlib's parser go through
the importer's fallback), runs it and compares: integers and booleans exactly,
floats to the digits the spec prints (relative 1e-3, absolute 1e-4).

Values given per process (``// num_replicas: 2``, ``%x@(0, 0): ...``) run the
function on that process grid and compare each device's results. Values of
tuple type are read as tuples (``([1.0, 2.0], (3))``). An example of an op
that gives no values (``after_all``, ``send``, ``infeed``, ...) is imported,
verified and compiled, on the smallest process grid its replica groups or
source-target pairs fit in: reported as "compiled". Examples this harness
cannot run are reported as skipped with the reason: values whose type no
signature gives, examples of other sections without expected values. Typing
errors of examples (a missing ``<``, a name written twice) are corrected first, each
listed in :data:`CORRECTIONS` and reported with the example; errata of
substance are listed in :data:`KNOWN`.

    python -m interop.tools.spec_examples ../shared/reference/stablehlo-spec.md [--verbose]
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from xla_dialect.errors import XlaError

_SECTION = re.compile(r"^### (\w+)\s*$", re.M)
_BLOCK = re.compile(r"```mlir\n(.*?)```", re.S)
_VALUE_LINE = re.compile(r"^//\s*(%[\w#@(), ]+?)\s*[:=]\s*(.+)$")


@dataclass
class Example:
    """One ``mlir`` example of an op section."""

    op: str
    index: int
    body: list[str]  # the op lines
    inputs: dict[str, dict[int, str]] = field(default_factory=dict)  # %name -> {device: value text}
    expected: dict[str, dict[int, str]] = field(default_factory=dict)
    skip: str = ""
    corrected: str = ""  # the typing errors of the example corrected before it ran (CORRECTIONS)
    num_replicas: int = 1
    num_partitions: int = 1

    @property
    def name(self) -> str:
        """``op[index]``."""
        return f"{self.op}[{self.index}]"


def examples(spec_text: str) -> list[Example]:
    """Every ``mlir`` example of every op section of the specification, in order."""
    out: list[Example] = []
    sections = list(_SECTION.finditer(spec_text))
    for k, section in enumerate(sections):
        end = sections[k + 1].start() if k + 1 < len(sections) else len(spec_text)
        text = spec_text[section.end():end]
        index = 0
        for block in _BLOCK.finditer(text):
            body, corrected = _corrected(section.group(1), block.group(1))
            for example in _split_block(section.group(1), body):
                example.index = index
                example.corrected = corrected
                index += 1
                if example.skip:
                    pass
                elif not example.body:
                    example.skip = "no ops"
                elif not example.expected and not _uses_own_op(example):
                    example.skip = "no expected values"
                out.append(example)
    return out


CORRECTIONS = {
    "all_reduce": [('"stablehlo.all_reduce"(%operand0, %operand0)', '"stablehlo.all_reduce"(%operand0, %operand1)',
                    "its second operand is written %operand0; the expected %result1 sums %operand1")],
    "collective_broadcast": [("(tensor1x2xi64>)", "(tensor<1x2xi64>)", "the operand type lacks its '<'")],
    "collective_reduce": [("(tensor1x2xi64>)", "(tensor<1x2xi64>)", "the operand type lacks its '<'")],
    "is_finite": [("(tensor<7xf64)", "(tensor<7xf64>)", "the operand type lacks its '>'")],
    "sign": [("// operand:", "// %operand:", "the operand line lacks its '%'")],
    "slice": [("// % result:", "// %result:", "the result line reads '% result'")],
}
"""Typing errors of the specification's examples, corrected before they run: op section -> (as written,
corrected, what was wrong). Each corrected example is reported with the correction (the values and the ops'
meaning are untouched)."""


def _corrected(op: str, block: str) -> tuple[str, str]:
    """``block`` with the :data:`CORRECTIONS` of ``op`` applied, and what was corrected ("" for nothing)."""
    applied = []
    for wrong, right, why in CORRECTIONS.get(op, ()):
        if wrong in block:
            block = block.replace(wrong, right)
            applied.append(why)
    return block, "; ".join(applied)


def _split_block(op: str, text: str) -> list[Example]:
    """The examples of one ``mlir`` block: a value given after the expected values of an example (and before
    any new op) starts the next one. A value continues on the following comment lines until its brackets
    close."""
    examples = [Example(op, 0, [])]
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        raw, line = lines[i], lines[i].strip()
        i += 1
        m = _VALUE_LINE.match(line)
        if m:
            value = m.group(2).split("//")[0].strip()  # (a comment may follow the value)
            while value.count("[") > value.count("]") and i < len(lines) and lines[i].strip().startswith("//"):
                value += " " + lines[i].strip()[2:].split("//")[0].strip()
                i += 1
            current = examples[-1]
            name, device = _name_and_device(m.group(1), current)
            if current.body and current.expected and _starts_new(current, name):
                examples.append(Example(op, 0, []))
                current = examples[-1]
                name, device = _name_and_device(m.group(1), current)
            (current.expected if current.body else current.inputs).setdefault(name, {})[device] = value
        elif (grid := _GRID_LINE.match(line)) is not None:
            setattr(examples[-1], grid.group(1), int(grid.group(2)))
        elif line.startswith("//") or not line:
            continue
        else:
            current = examples[-1]
            if current.expected:  # ops after the expected values: a new example without inputs
                examples.append(Example(op, 0, []))
                current = examples[-1]
            current.body.append(raw)
    return examples


_GRID_LINE = re.compile(r"^//\s*(num_replicas|num_partitions)\s*:\s*(\d+)\s*$")
_DEVICE = re.compile(r"^(%[\w#]+)@\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def _name_and_device(text: str, example: Example) -> tuple[str, int]:
    """``%x@(r, p)`` -> (``%x``, the device ``r * num_partitions + p``); ``%x`` -> (``%x``, 0)."""
    m = _DEVICE.match(text.strip())
    if not m:
        return text.strip(), 0
    return m.group(1), int(m.group(2)) * example.num_partitions + int(m.group(3))


def _starts_new(example: Example, name: str) -> bool:
    """Whether a value named ``name`` after ``example``'s ops and expected values begins another example."""
    return name not in _result_names(example.body) and name not in example.expected


def _result_names(body: list[str]) -> set[str]:
    """The names the ops of ``body`` define (``%r:2 = ...`` defines ``%r#0``, ``%r#1``, also written ``%r0``)."""
    names = set()
    for line in body:
        m = re.match(r"\s*(%[\w#]+(?:\s*,\s*%[\w#]+)*)(?::(\d+))?\s*=", line)
        if m:
            names.update(n.strip() for n in m.group(1).split(","))
            if m.group(2):
                base = m.group(1).strip()
                for k in range(int(m.group(2))):
                    names.update((f"{base}#{k}", f"{base}{k}"))
    return names


# ----------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(\[|\]|\(|\)|,|true|false|[-+]?inf|[-+]?nan|[-+]?0x[0-9A-Fa-f]+|[-+]?[0-9.]+(?:[eE][-+]?\d+)?)")


class Parenthesized(list):
    """A parenthesized group of the spec's value notation: a complex number ``(re, im)`` or a tuple's elements
    (``([1.0, 2.0], (3))``), told apart by the value's type (:func:`to_array`)."""


def parse_value(text: str):
    """A nested list of Python numbers for the spec's value notation (``[[1, 2], [3, 4]]``, ``true``, ``nan``,
    ``0x7F800000`` bit patterns as ``("bits", int)``, parenthesized groups as :class:`Parenthesized`: complex
    numbers ``(1.0, 2.0)`` and tuples ``([1.0, 2.0], (3))``)."""
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot read the value {text!r} at {text[pos:pos + 10]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    it = iter(tokens)

    def value(tok):
        if tok == "[":
            items = []
            for t in it:
                if t == "]":
                    return items
                if t != ",":
                    items.append(value(t))
            raise ValueError("unclosed [")
        if tok == "(":  # a complex number (re, im) or a tuple
            parts = Parenthesized()
            for t in it:
                if t == ")":
                    return parts
                if t != ",":
                    parts.append(value(t))
            raise ValueError("unclosed (")
        if tok in ("true", "false"):
            return tok == "true"
        if "0x" in tok.lower():
            return ("bits", int(tok, 16))
        return float(tok) if any(c in tok for c in ".eEin") else int(tok)

    return value(next(it))


def to_array(value, type_text: str):
    """``value`` (from :func:`parse_value`) as an array of the tensor type ``type_text``, or as a tuple of them
    (nested as the type) for a ``tuple<...>`` type."""
    from ..stablehlo import import_stablehlo

    type_text = type_text.strip()
    if type_text.startswith("tuple<"):
        element_types = _split_types(type_text[len("tuple<"):-1]) if type_text != "tuple<>" else []
        if not isinstance(value, Parenthesized) or len(value) != len(element_types):
            raise ValueError(f"{value!r} is not a value of {type_text}: expected {len(element_types)} elements "
                             "in parentheses")
        return tuple(to_array(v, t) for v, t in zip(value, element_types))

    module = import_stablehlo(f"func.func @main(%x: {type_text}) -> {type_text} {{\n  return %x : {type_text}\n}}")
    arg_type = next(iter(module.ops)).function_type.inputs.data[0]
    from xla_dialect.types import numpy_dtype

    dtype = numpy_dtype(arg_type)
    shape = tuple(arg_type.get_shape())

    def plain(v):
        if isinstance(v, Parenthesized):
            if dtype.kind != "c" or len(v) != 2 or not all(isinstance(p, (int, float)) for p in v):
                raise ValueError(f"{list(v)!r}: a parenthesized value of {type_text} must be a complex (re, im)")
            return complex(v[0], v[1])
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, tuple):  # bit pattern
            return np.array(v[1], dtype=f"u{dtype.itemsize}").view(dtype)
        return v

    flat = plain(value)
    if isinstance(flat, np.ndarray):
        return flat.reshape(shape)
    return np.array(flat, dtype=dtype).reshape(shape) if shape or not isinstance(flat, list) \
        else np.array(flat, dtype=dtype)


# ----------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------


def _split_types(text: str) -> list[str]:
    from ..stablehlo.attributes import top_level_parts

    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return top_level_parts(text)


_OP_START = re.compile(r'(?:(%[\w#]+(?::\d+)?(?:\s*,\s*%[\w#]+)*)\s*=\s*)?"([\w.]+)"\(([^)]*)\)')


def _balanced(text: str, i: int) -> int:
    """The index after the bracketed group that starts at ``text[i]`` (``(``, ``[``, ``{`` or ``<``)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "([{<":
            depth += 1
        elif c in ")]}>" and not (c == ">" and text[i - 1] == "-"):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _signature_after(text: str, i: int) -> tuple[list[str], list[str]] | None:
    """The ``(operand types) -> result types`` of the generic op whose operand list ends at ``i``: the first
    ``:`` at bracket depth 0 after its regions and attributes."""
    while i < len(text):
        c = text[i]
        if c in "([{<":
            i = _balanced(text, i)
            continue
        if c == ":":
            rest = text[i + 1:].lstrip()
            if not rest.startswith("("):
                return None
            close = _balanced(rest, 0)
            operands = rest[1:close - 1]
            after = rest[close:].lstrip()
            if not after.startswith("->"):
                return None
            after = after[2:].lstrip()
            word = re.match(r"[^\s<]*", after).group(0)  # a type without parameters: !stablehlo.token
            if after.startswith("("):
                end = _balanced(after, 0)
            elif after[len(word):len(word) + 1] == "<":
                end = _balanced(after, len(word))
            else:
                end = len(word)
            return _split_types(operands), _split_types(after[:end])
        if c == '"' and i + 1 < len(text) and _OP_START.match(text, i):  # the next op: no signature here
            return None
        i += 1
    return None


def _value_types(body: list[str]) -> dict[str, str]:
    """%name -> type for every operand and result that the generic-form signatures of ``body`` give."""
    types: dict[str, str] = {}
    text = " ".join(line.strip() for line in body)
    for m in _OP_START.finditer(text):
        sig = _signature_after(text, m.end())
        if sig is None:
            continue
        operand_types, result_types = sig
        operands = [o.strip() for o in m.group(3).split(",") if o.strip()]
        for name, t in zip(operands, operand_types):
            types.setdefault(name, t)
        if m.group(1):
            names = [n.strip() for n in m.group(1).split(",")]
            if len(names) == 1 and ":" in names[0]:  # %r:2 = ... -> %r#0, %r#1 (the spec also writes %r0, %r1)
                base, count = names[0].split(":")
                for k, t in zip(range(int(count)), result_types):
                    types.setdefault(f"{base}{k}", t)
                names = [f"{base}#{k}" for k in range(int(count))]
            for name, t in zip(names, result_types):
                types.setdefault(name, t)
    # Pretty-form element-wise ops (``%r = stablehlo.add %a, %b : tensor<i64>``): one type for all.
    for line in body:
        m = _PRETTY_SAME_TYPE.match(line.strip())
        if m:
            for name in [*m.group(1).split(","), *m.group(3).split(",")]:
                types.setdefault(name.strip(), m.group(4).strip())
    return types


_PRETTY_SAME_TYPE = re.compile(r"^(%[\w#]+)\s*=\s*stablehlo\.(\w+)\s+(%[\w#]+(?:\s*,\s*%[\w#]+)*)\s*:\s*"
                               r"(tensor<[^()]*>)\s*$")


KNOWN = {
    "cholesky[0]": "the example's result type is f64 for an f32 operand (jaxlib's verifier rejects it)",
    "divide[0]": "the expected values are 17/3, the operands 17.1 and 3",
    "dynamic_conv[0]": "its dimension numbers name input dimension 0 twice (jaxlib's verifier rejects them)",
    "tuple[0]": "its values are typed memref<2xf32>, not a StableHLO type (tensors, tokens and tuples of them)",
    "composite[0]": "its decomposition is a function @my_op that the example does not define",
    "custom_call[0]": "its attribute dictionaries end with a comma, and its values are typed memref<4xf64>, not a "
                      "StableHLO type",
    "negate[1]": "the complex operand is written as a scalar '(2.5, 0.0)' and the result as two reals",
    "power[0]": "f64 operands, f32-rounded expected values (0.333333343, and inf for 10000**10 = 1e40)",
    "rng[0]": "random values: the example's are illustrative",
    "while[0]": "the loop runs 9 times (%init_i is 1, the condition i < 10), so %results1 is 9, not the 10 given",
    "tan[0]": "inputs printed to 9 digits next to the pole at pi/2: tan of them differs by orders of magnitude",
    "collective_reduce[0]": "its attributes lack a comma after 'has_dynamic_root = false', and the op has no "
                            "reduction region (the spec's 'computation' operand), so it does not parse",
    "collective_reduce[1]": "as [0], and its signature types one operand of its two (%root is untyped): skipped",
}
"""Examples of the specification that cannot pass as written, and why (errata and harness limits)."""


@dataclass
class Outcome:
    """What running one example gave."""

    example: Example
    status: str  # passed | failed | skipped | error
    message: str = ""


def _uses_own_op(example: Example) -> bool:
    """Whether the example's ops include the op of its section (``"stablehlo.after_all"`` under ``after_all``)."""
    return any(f"stablehlo.{example.op}" in line for line in example.body)


def _compile_only(example: Example, types: dict[str, str]) -> Outcome:
    """An example of an op that gives no values: its ops imported, verified and compiled on its process grid, as
    the body of a function whose arguments are the values the ops use without defining."""
    import lowering

    from ..stablehlo import import_stablehlo

    defined = _result_names(example.body)
    text = " ".join(example.body)
    # (region arguments are defined by their block headers: ``^bb0(%arg0: tensor<i32>, ...)``)
    block_args = set(re.findall(r"(%[\w]+)\s*:", " ".join(line for line in example.body if "^bb" in line)))
    used = [n for n in dict.fromkeys(re.findall(r"%[\w#]+", text))
            if n not in defined and n not in block_args and "#" not in n]
    missing = [n for n in used if n not in types]
    if missing:
        return Outcome(example, "skipped",
                       f"no expected values, and no signature gives the type of {', '.join(missing)}")
    args = ", ".join(f"{n}: {types[n]}" for n in used)
    source = f"func.func @main({args}) {{\n" + "\n".join(example.body) + "\n  return\n}\n"
    replicas = example.num_replicas
    if replicas == example.num_partitions == 1:  # no grid given: the smallest one its process ids fit in
        ids = [int(i) for groups in re.findall(r"(?:replica_groups|source_target_pairs)\s*=\s*dense<([^>]*)>", text)
               for i in re.findall(r"-?\d+", groups)]
        replicas = max([0, *ids]) + 1
    try:
        module = import_stablehlo(source)
        lowering.compile(module, num_replicas=replicas, num_partitions=example.num_partitions)
    except (XlaError, ValueError) as e:
        return Outcome(example, "error", f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
    except Exception as e:  # noqa: BLE001 - a harness limitation or a bug: reported, not fatal
        return Outcome(example, "error", f"harness: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
    return Outcome(example, "compiled", "no expected values: imported, verified and compiled")


def run_example(example: Example) -> Outcome:
    """Run one example (see the module docstring)."""
    if example.skip:
        return Outcome(example, "skipped", example.skip)
    types = _value_types(example.body)
    if not example.expected:
        return _compile_only(example, types)
    missing = [n for n in (*example.inputs, *example.expected) if n not in types and n not in _result_names(example.body)]
    if missing:
        return Outcome(example, "skipped", f"no signature gives the type of {', '.join(missing)}")
    import lowering

    from ..stablehlo import import_stablehlo

    defined = _result_names(example.body)  # inputs the example also defines with ops (constants)
    inputs_used = [n for n in example.inputs if n not in defined]
    args = ", ".join(f"{n}: {types[n]}" for n in inputs_used)
    results = list(example.expected)
    returned = [_returned_name(n, example.body) for n in results]
    result_types = [types[n] for n in results]
    text = (f"func.func @main({args}) -> ({', '.join(result_types)}) {{\n" + "\n".join(example.body) + "\n"
            f"  return {', '.join(returned)} : {', '.join(result_types)}\n}}\n")
    devices = example.num_replicas * example.num_partitions
    try:
        inputs = [[to_array(parse_value(_on(example.inputs[n], d, n)), types[n]) for n in inputs_used]
                  for d in range(devices)]
        wanted = [[to_array(parse_value(_on(example.expected[n], d, n)), types[n]) for n in results]
                  for d in range(devices)]
        module = import_stablehlo(text)
        exe = lowering.compile(module, num_replicas=example.num_replicas, num_partitions=example.num_partitions,
                               denormals="keep")
        per_device = [exe(*inputs[0])] if devices == 1 else list(exe(*inputs))
    except (XlaError, ValueError) as e:
        return Outcome(example, "error", f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
    except Exception as e:  # noqa: BLE001 - a harness limitation or a bug: reported, not fatal
        return Outcome(example, "error", f"harness: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
    for d, (got, want) in enumerate(zip(per_device, wanted)):
        where = f" on device {d}" if devices > 1 else ""
        names = [f"{name}{path}" for name, w in zip(results, want) for path in _leaf_paths(w)]
        want = [leaf for w in want for leaf in _leaves(w)]  # (tuple results come back flattened, in order)
        if len(got) != len(want):
            return Outcome(example, "failed", f"{len(got)} results{where}, expected {len(want)}")
        for name, g, w in zip(names, got, want):
            g = np.asarray(g)
            if g.shape != w.shape:
                return Outcome(example, "failed", f"{name}{where}: shape {g.shape}, expected {w.shape}")
            if w.dtype.kind in "fc":
                ok = np.allclose(g.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                                 w.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                                 rtol=1e-3, atol=1e-4, equal_nan=True)
            else:
                ok = np.array_equal(g, w)
            if not ok:
                return Outcome(example, "failed", f"{name}{where}: got {g.tolist()}, expected {w.tolist()}")
    corrected = f" (corrected: {example.corrected})" if example.corrected else ""
    return Outcome(example, "passed", f"{len(results)} results{corrected}")


def _leaves(value) -> list:
    """The arrays of a value (a tuple's, depth first)."""
    return [leaf for v in value for leaf in _leaves(v)] if isinstance(value, tuple) else [value]


def _leaf_paths(value, path: str = "") -> list[str]:
    """Where each of :func:`_leaves` is in ``value``: ``""`` for an array, ``"[0][1]"`` inside tuples."""
    if isinstance(value, tuple):
        return [p for k, v in enumerate(value) for p in _leaf_paths(v, f"{path}[{k}]")]
    return [path]


def _on(values: dict[int, str], device: int, name: str) -> str:
    """The value text of ``name`` on ``device`` (a value given without a device is every device's)."""
    if device in values:
        return values[device]
    if list(values) == [0]:
        return values[0]
    raise ValueError(f"no value of {name} for device {device}")


def _returned_name(name: str, body: list[str]) -> str:
    """The SSA name to return for an expected value (``%r0`` of ``%r:2 = ...`` is ``%r#0``)."""
    m = re.match(r"^(%\w*?)(\d+)$", name)
    if m:
        for line in body:
            if re.match(rf"\s*{re.escape(m.group(1))}:\d+\s*=", line):
                return f"{m.group(1)}#{m.group(2)}"
    return name


def run_spec(path: str) -> list[Outcome]:
    """Every example of the specification at ``path``, run."""
    with open(path) as f:
        return [run_example(e) for e in examples(f.read())]


def main(argv=None) -> int:
    """``python -m interop.tools.spec_examples SPEC.md [--verbose]``: run the examples, print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="stablehlo-spec.md")
    parser.add_argument("--verbose", "-v", action="store_true", help="one line per example")
    options = parser.parse_args(argv)
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    outcomes = run_spec(options.spec)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
        if options.verbose or o.status in ("failed", "error"):
            print(f"{o.status:8} {o.example.name}: {o.message}")
    print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f" of {len(outcomes)} examples")
    return 0 if not counts.get("failed") and not counts.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
