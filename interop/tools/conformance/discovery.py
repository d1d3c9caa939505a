"""Discovery (:func:`discover`): the ``.mlir`` files under the given paths, what their ``// RUN`` lines say
(run, round trip, disabled, skipped), their ``// -----`` chunks, and the op family of each (:func:`family_of`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from .records import ConformanceError, Program
from .rewriting import split_programs


_RUN_LINE = re.compile(r"(?m)^//\s*(RUN(?:-DISABLED(?:\((?P<why>[^)]*)\))?)?)\s*:?\s*(?P<cmd>.*)$")
_ARGS = re.compile(r'--args="(?P<args>[^"]*)"')
_DTYPES = r"(?:bfloat16|float(?:16|32|64)|complex(?:64|128)|u?int(?:2|4|8|16|32|64)|bool|float8_\w+?|float4_\w+?)"
# Where a JAX harness file name stops naming the op: the first dtype, a test parameter (shape, lhs,
# dtypes, a number, "__"), or the folder's suffix (_dynamic, _qi8, _chlo).
_FAMILY_END = re.compile(rf"_{_DTYPES}(?=_|$)|_in{_DTYPES}|__|_-?\d|_(?:shape|lhs|dtypes|dynamic|qi8|chlo)(?=_|$)")
_LABEL = re.compile(r"(?:module\s+@(?P<module>[\w$.-]+)|func\.func\s+(?:public\s+|private\s+)?@(?P<func>[\w$.\"-]+))")


def family_of(path: str) -> str:
    """The op family of a corpus file: its name up to the first dtype (``abs_float32_20_20`` -> ``abs``).

    Names without a dtype stop at their first parameter (``gather_shape__10_...`` -> ``gather``).
    """
    stem = os.path.splitext(os.path.basename(path))[0]
    m = _FAMILY_END.search(stem)
    return (stem[:m.start()] if m else stem) or stem


def _expected_prints(text: str) -> list[str] | None:
    """The results the interpreter is expected to print (plain ``CHECK``/``CHECK-NEXT`` lines, ``{LITERAL}`` or
    not) as dense literals, None when the lines show anything else (``interpreter.print`` output included).

    ``// CHECK: tensor<2xi32> {`` ``// CHECK-NEXT: [3, 3]`` ``// CHECK-NEXT: }``
    becomes ``dense<[3, 3]> : tensor<2xi32>``; ``tensor<ui8> {1}`` ``dense<1> : tensor<ui8>``; a complex
    element printed ``[re, im]`` becomes ``(re, im)``; an empty tensor ``dense<> : tensor<0x2xi8>``.
    """
    lines = [m.group(1).strip()
             for m in re.finditer(r"(?m)^[ \t]*//\s*CHECK(?:-NEXT)?(?:\{LITERAL\})?:(.*)$", text)]
    if not lines:
        return None
    results, current, body = [], None, []
    for line in lines:
        one_line = re.fullmatch(r"(tensor<[^{]*>)\s*\{(.*)\}", line)
        head = re.fullmatch(r"(tensor<[^{]*>)\s*\{", line)
        if one_line and current is None:
            results.append(_dense_literal(one_line.group(1), one_line.group(2).strip()))
        elif head and current is None:
            current, body = head.group(1), []
        elif line == "}" and current is not None:
            results.append(_dense_literal(current, " ".join(body)))
            current = None
        elif current is not None:
            body.append(line)
        else:
            return None  # not a printed tensor: not understood
    return None if current is not None else results


def _dense_literal(type_text: str, values: str) -> str:
    """``dense<values> : type`` for a tensor the interpreter printed (see :func:`_expected_prints`)."""
    if re.fullmatch(r"[\[\],\s]*", values) and re.search(r"\b0x|<0x|x0x|x0>", type_text):
        values = ""  # an empty tensor: MLIR writes dense<>
    elif "complex<" in type_text:
        number = r"[-+]?(?:[\d.]+(?:e[-+]?\d+)?|inf|nan)"
        values = re.sub(rf"\[\s*({number})\s*,\s*({number})\s*\]", r"(\1, \2)", values)
    return f"dense<{values}> : {type_text}"


def _programs_of_file(path: str, shown: str) -> list[Program]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stem = os.path.splitext(os.path.basename(path))[0]
    family = family_of(path)
    runs = [(m.group(1) != "RUN", m.group("why") or "", m.group("cmd").strip()) for m in _RUN_LINE.finditer(text)]
    interpret = [r for r in runs if "--interpret" in r[2]]
    positive = [r for r in interpret if not r[0] and not r[2].startswith("not ")]
    if not positive:
        disabled = [r for r in interpret if r[0]]
        if disabled:
            why = disabled[0][1] or "disabled"
            return [Program(shown, stem, "disabled", message=f"RUN-DISABLED upstream ({why})", family=family)]
        if interpret:
            return [Program(shown, stem, "skip", message="error-message test (not stablehlo-translate | FileCheck)",
                            family=family)]
        if any("--serialize" in r[2] for r in runs if not r[0]):
            return [Program(shown, stem, "roundtrip", text, family=family)]
        return [Program(shown, stem, "skip", message="no interpreter or serialization RUN line", family=family)]
    command = positive[0][2]
    args = _ARGS.search(command)
    split = any("split-input-file" in r[2] for r in runs if not r[0])
    file_check = "FileCheck" in command
    if file_check and not split and _expected_prints(text) is None:
        return [Program(shown, stem, "skip", message="FileCheck test of printed output", family=family)]
    chunks = split_programs(text) if split else [(0, text)]
    programs = []
    for i, (line, chunk) in enumerate(chunks):
        if "func.func" not in chunk:
            continue
        if split:
            label = _LABEL.search(chunk)
            name = f"{stem}[{i}] {label.group('module') or label.group('func')}" if label else f"{stem}[{i}]"
        else:
            name = stem
        expected = _expected_prints(chunk) if file_check else None
        if file_check and expected is None:  # (e.g. the output of interpreter.print ops: not captured)
            programs.append(Program(shown, name, "skip", message="FileCheck test of printed output other than "
                                    "the results", family=family))
            continue
        entries = _checked_functions(chunk) if "@main" not in chunk and args is None and not expected else []
        if len(entries) > 1:
            # No @main and several functions with checks: the interpreter runs each; so do we, one program each.
            for entry in entries:
                programs.append(Program(shown, f"{name} @{entry}", "run", chunk, line, None, None, family=family,
                                        entry=entry))
            continue
        programs.append(Program(shown, name, "run", chunk, line, args.group("args") if args else None, expected,
                                family=family))
    return programs


_FUNC_HEAD = re.compile(r"func\.func\s+(?:public\s+)?@([\w.$-]+)\s*\(\s*\)")


def _checked_functions(chunk: str) -> list[str]:
    """The argument-less functions of a chunk whose bodies hold check ops, in text order."""
    heads = list(_FUNC_HEAD.finditer(chunk))
    out = []
    for k, m in enumerate(heads):
        body = chunk[m.end(): heads[k + 1].start() if k + 1 < len(heads) else len(chunk)]
        if "check." in body:
            out.append(m.group(1))
    return out


def discover(paths: Iterable[str]) -> list[Program]:
    """Every program in the ``.mlir`` files at or under ``paths`` (sorted by path, then file order)."""
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".mlir"))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise ConformanceError(f"no such file or directory: {p}")
    programs: list[Program] = []
    for f in sorted(dict.fromkeys(files)):
        programs.extend(_programs_of_file(f, os.path.relpath(f) if not os.path.isabs(f) else f))
    return programs
