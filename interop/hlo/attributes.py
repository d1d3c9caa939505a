"""Reading and writing the values of HLO instruction attributes.

Each reader takes the attribute's text as :mod:`interop.hlo.syntax` kept it
(``{1,0}``, ``{[0:4:2], [1:3]}``, ``0_0x1_1_0``, ``{size=3x3 stride=2x2}``,
``b01f_01io->b01f``, ``{{0,1},{2,3}}``, ``[2,2]<=[4]``, ``"text"``...) and
returns Python values; it raises :class:`AttributeTextError`, which the
importer turns into an error naming the instruction's line and column. Each
writer prints what the matching reader reads, as XLA's printer writes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from xla_dialect.errors import XlaError


class AttributeTextError(XlaError, ValueError):
    """An attribute value is malformed (the importer adds where)."""


_INT = re.compile(r"-?\d+")


def ints(text: str) -> tuple[int, ...]:
    """``{1,0}`` (or ``{}``) -> (1, 0)."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise AttributeTextError(f"expected a list such as {{1,0}}, got {text!r}")
    body = body[1:-1].strip()
    if not body:
        return ()
    try:
        return tuple(int(x) for x in body.split(","))
    except ValueError:
        raise AttributeTextError(f"expected integers in {text!r}") from None


def integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise AttributeTextError(f"expected an integer, got {text!r}") from None


def boolean(text: str) -> bool:
    t = text.strip()
    if t in ("true", "{true}"):
        return True
    if t in ("false", "{false}"):
        return False
    raise AttributeTextError(f"expected true or false, got {text!r}")


def floating(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise AttributeTextError(f"expected a number, got {text!r}") from None


def string(text: str) -> str:
    """``"a\\"b"`` -> ``a"b`` (a bare word is taken as it is)."""
    t = text.strip()
    if t.startswith('"'):
        if len(t) < 2 or not t.endswith('"'):
            raise AttributeTextError(f"unterminated string {text!r}")
        return unescape(t[1:-1])
    return t


def unescape(body: str) -> str:
    """C-style escapes of XLA's printer (``\\"``, ``\\\\``, ``\\n``, ``\\t``)."""
    if "\\" not in body:
        return body
    return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def quote(value: str) -> str:
    """A string as XLA prints it: quoted, with ``"`` and ``\\`` escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def ffi_dictionary(text: str):
    """A typed-FFI ``backend_config`` (``{diag = 85 : ui8, uplo = 76 : ui8}``, MLIR dictionary syntax,
    bare or quoted; empty: no attributes) as the xDSL ``DictionaryAttr`` the StableHLO importer gives
    JAX's ``mhlo.backend_config`` (integer and float types kept)."""
    from xdsl.dialects.builtin import DictionaryAttr
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError

    from xla_dialect.dialect import check_string_literals, make_context

    body = string(text).strip()
    if not body:
        return DictionaryAttr({})
    try:
        check_string_literals(body)
        parser = Parser(make_context(), body)
        attr = parser.parse_attribute()
        trailing = parser.pos < len(body) and body[parser.pos:].strip()
    except (ParseError, XlaError) as e:
        raise AttributeTextError(f"typed-FFI attributes {text!r} are not an MLIR dictionary: {e}") from None
    if not isinstance(attr, DictionaryAttr) or trailing:
        raise AttributeTextError(f"typed-FFI attributes must be one MLIR dictionary {{name = value : type, ...}}, "
                                 f"got {text!r}")
    return attr


def format_ffi_dictionary(attr) -> str:
    """A typed-FFI attribute dictionary as XLA prints it in ``backend_config=``: MLIR syntax, names sorted."""
    import io

    from xdsl.dialects.builtin import DictionaryAttr
    from xdsl.printer import Printer

    out = io.StringIO()
    Printer(stream=out).print_attribute(DictionaryAttr(dict(sorted(attr.data.items()))))
    return out.getvalue()


def computation(text: str) -> str:
    """``%region_0.1`` -> ``region_0.1``."""
    t = text.strip()
    if t.startswith("{") and t.endswith("}") and "," not in t:
        t = t[1:-1].strip()
    if not t:
        raise AttributeTextError("expected a computation name")
    return t.lstrip("%")


def computations(text: str) -> list[str]:
    """``{%a, %b}`` -> ['a', 'b'] (a single name is a list of one)."""
    t = text.strip()
    if t.startswith("{"):
        body = t[1:-1].strip()
        return [x.strip().lstrip("%") for x in body.split(",")] if body else []
    return [computation(t)]


_SLICE = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")


def slices(text: str) -> tuple[list[int], list[int], list[int]]:
    """``{[0:4:2], [1:3]}`` -> (starts, limits, strides)."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttributeTextError(f"expected slice={{[start:limit:stride], ...}}, got {text!r}")
    starts, limits, strides = [], [], []
    body = t[1:-1]
    pos = 0
    for m in _SLICE.finditer(body):
        if body[pos:m.start()].strip(" ,\n"):
            raise AttributeTextError(f"malformed slice {text!r}")
        starts.append(int(m.group(1)))
        limits.append(int(m.group(2)))
        strides.append(int(m.group(3)) if m.group(3) is not None else 1)
        pos = m.end()
    if body[pos:].strip(" ,\n"):
        raise AttributeTextError(f"malformed slice {text!r}")
    return starts, limits, strides


def format_slices(starts, limits, strides) -> str:
    parts = [f"[{s}:{l}]" if st == 1 else f"[{s}:{l}:{st}]" for s, l, st in zip(starts, limits, strides)]
    return "{" + ", ".join(parts) + "}"


def padding(text: str) -> tuple[list[int], list[int], list[int]]:
    """``0_0x1_1_2`` -> (lows, highs, interiors); ``{}`` or empty: rank 0."""
    t = text.strip()
    if t in ("", "{}"):
        return [], [], []
    lows, highs, interiors = [], [], []
    for dim in t.split("x"):
        parts = dim.split("_")
        if len(parts) not in (2, 3):
            raise AttributeTextError(f"expected padding low_high[_interior] per dimension, got {text!r}")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise AttributeTextError(f"malformed padding {text!r}") from None
        lows.append(values[0])
        highs.append(values[1])
        interiors.append(values[2] if len(values) == 3 else 0)
    return lows, highs, interiors


def format_padding(lows, highs, interiors) -> str:
    if not lows:
        return "{}"
    return "x".join(f"{l}_{h}_{i}" for l, h, i in zip(lows, highs, interiors))


WINDOW_FIELDS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")


def window(text: str) -> dict[str, list]:
    """``{size=3x3 stride=2x2 pad=0_1x0_1 lhs_dilate=1x1 rhs_dilate=1x1 rhs_reversal=0x0}`` -> dict of lists.

    ``pad`` is a list of (low, high) pairs; absent fields are absent from the dict.
    """
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttributeTextError(f"expected window={{size=...}}, got {text!r}")
    out: dict[str, list] = {}
    for item in t[1:-1].split():
        key, _, value = item.partition("=")
        if key not in WINDOW_FIELDS or not value:
            raise AttributeTextError(f"unknown window field {item!r} (expected {', '.join(WINDOW_FIELDS)})")
        try:
            if key == "pad":
                pairs = []
                for d in value.split("x"):
                    lo, hi = d.split("_")
                    pairs.append((int(lo), int(hi)))
                out[key] = pairs
            else:
                out[key] = [int(v) for v in value.split("x")]
        except ValueError:
            raise AttributeTextError(f"malformed window field {item!r}") from None
    return out


def format_window(sizes, strides, pads, lhs_dilate, rhs_dilate, reversal=None) -> str:
    """The window text; fields at their defaults are left out (as XLA prints them)."""
    if not sizes:
        return "{}"
    parts = ["size=" + "x".join(map(str, sizes))]
    if any(s != 1 for s in strides):
        parts.append("stride=" + "x".join(map(str, strides)))
    if any(p != (0, 0) for p in pads):
        parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in pads))
    if any(d != 1 for d in lhs_dilate):
        parts.append("lhs_dilate=" + "x".join(map(str, lhs_dilate)))
    if any(d != 1 for d in rhs_dilate):
        parts.append("rhs_dilate=" + "x".join(map(str, rhs_dilate)))
    if reversal is not None and any(reversal):
        parts.append("rhs_reversal=" + "x".join("1" if r else "0" for r in reversal))
    return "{" + " ".join(parts) + "}"


def dim_labels(text: str) -> dict[str, object]:
    """``b01f_01io->b01f`` -> convolution dimension numbers (spatial dims by their digit)."""
    t = text.strip()
    m = re.fullmatch(r"([\w]+)_([\w]+)->([\w]+)", t)
    if m is None:
        raise AttributeTextError(f"expected dim_labels like b01f_01io->b01f, got {text!r}")
    lhs, rhs, out = m.groups()

    def read(labels: str, a: str, b: str, what: str) -> tuple[int, int, list[int]]:
        if labels.count(a) != 1 or labels.count(b) != 1:
            raise AttributeTextError(f"{what} labels {labels!r} need exactly one {a!r} and one {b!r}")
        spatial = {}
        for i, c in enumerate(labels):
            if c.isdigit():
                spatial[int(c)] = i
            elif c not in (a, b):
                raise AttributeTextError(f"unexpected label {c!r} in {what} labels {labels!r}")
        if sorted(spatial) != list(range(len(spatial))):
            raise AttributeTextError(f"{what} labels {labels!r} must number spatial dimensions 0, 1, ...")
        return labels.index(a), labels.index(b), [spatial[k] for k in range(len(spatial))]

    ib, iff, isp = read(lhs, "b", "f", "input")
    ki, ko, ksp = read(rhs, "i", "o", "kernel")
    ob, of, osp = read(out, "b", "f", "output")
    if not (len(isp) == len(ksp) == len(osp)):
        raise AttributeTextError(f"dim_labels {text!r}: input, kernel and output have different spatial ranks")
    return dict(input_batch_dimension=ib, input_feature_dimension=iff, input_spatial_dimensions=isp,
                kernel_input_feature_dimension=ki, kernel_output_feature_dimension=ko, kernel_spatial_dimensions=ksp,
                output_batch_dimension=ob, output_feature_dimension=of, output_spatial_dimensions=osp)


def format_dim_labels(d: dict) -> str:
    def labels(rank, a_pos, a, b_pos, b, spatial):
        chars = ["?"] * rank
        chars[a_pos], chars[b_pos] = a, b
        for k, pos in enumerate(spatial):
            chars[pos] = str(k)
        return "".join(chars)

    n = len(d["input_spatial_dimensions"]) + 2
    return (labels(n, d["input_batch_dimension"], "b", d["input_feature_dimension"], "f", d["input_spatial_dimensions"])
            + "_" + labels(n, d["kernel_input_feature_dimension"], "i", d["kernel_output_feature_dimension"], "o",
                           d["kernel_spatial_dimensions"])
            + "->" + labels(n, d["output_batch_dimension"], "b", d["output_feature_dimension"], "f",
                            d["output_spatial_dimensions"]))


def int_lists(text: str) -> list[list[int]]:
    """``{{0,1},{2,3}}`` -> [[0, 1], [2, 3]]; ``{}`` -> []."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttributeTextError(f"expected {{{{...}},...}}, got {text!r}")
    body = t[1:-1].strip()
    if not body:
        return []
    groups = re.findall(r"\{([^{}]*)\}", body)
    if re.sub(r"\{[^{}]*\}", "", body).strip(" ,\n"):
        raise AttributeTextError(f"malformed list of lists {text!r}")
    out = []
    for g in groups:
        items = [x.strip() for x in g.split(",") if x.strip()]
        bad = next((x for x in items if not _INT.fullmatch(x)), None)
        if bad is not None:
            raise AttributeTextError(f"expected integers in {text!r}, got {bad!r}")
        out.append([int(x) for x in items])
    return out


_IOTA_GROUPS = re.compile(r"\[([\d,\s]+)\]\s*<=\s*\[([\d,\s]+)\](?:\s*T\(([\d,\s]+)\))?")


def replica_groups(text: str) -> list[list[int]]:
    """``{{0,1},{2,3}}``, XLA's iota form ``[2,2]<=[4]`` / ``[2,2]<=[2,2]T(1,0)`` or its mesh-axes form
    ``mesh['x'=2,'y'=2] {'x'}`` (:func:`mesh_replica_groups`) -> groups."""
    t = text.strip()
    if t.startswith("mesh[") or t.startswith("maximal_mesh["):
        return mesh_replica_groups(t)
    m = _IOTA_GROUPS.fullmatch(t)
    if m is None:
        return int_lists(t)
    shape = [int(x) for x in m.group(1).split(",")]
    reshape = [int(x) for x in m.group(2).split(",")]
    ids = np.arange(int(np.prod(reshape))).reshape(reshape)
    if m.group(3):
        order = [int(x) for x in m.group(3).split(",")]
        if sorted(order) != list(range(len(reshape))):
            raise AttributeTextError(f"replica_groups {text!r}: T({m.group(3)}) is not a permutation of the "
                                     f"{len(reshape)} dimensions of [{m.group(2)}]")
        ids = ids.transpose(order)
    if int(np.prod(shape)) != ids.size or len(shape) != 2:
        raise AttributeTextError(f"replica_groups {text!r}: the group shape must be 2-D and hold every id")
    return ids.reshape(shape).tolist()


_MESH_AXIS = re.compile(r"\s*'?([^'=,\s]+)'?\s*=\s*(\d+)\s*")
_AXIS_REF = re.compile(r"\s*'?([^':,\s]+)'?(?:\s*:\s*\((\d+)\)\s*(\d+))?\s*")


def mesh_replica_groups(text: str) -> list[list[int]]:
    """XLA's mesh-axes replica groups -> groups of device ids.

    ``mesh['x'=2,'y'=2] {'x'}``: the devices of a mesh (``0..N-1`` in row-major order over the axes, or
    ``device_ids=(...)`` after the mesh: an iota ``[2,2]<=[2,2]T(1,0)`` or the ids listed), grouped over the
    axes in braces: one group for each position on the other axes, its members in the order of the listed
    axes. A sub-axis ``'x':(p)s`` is the ``s`` devices at stride ``p`` within axis ``x``
    (XLA's ``MeshAxesReplicaGroupList``)."""
    t = text.strip()
    if t.startswith("maximal_mesh["):
        raise AttributeTextError(f"replica_groups {text!r}: a maximal mesh (one device) is not a replica group list")
    close = t.find("]")
    brace = t.rfind("{")
    if not t.startswith("mesh[") or close < 0 or brace < close or not t.endswith("}"):
        raise AttributeTextError(f"replica_groups {text!r}: expected mesh[<axis>=<size>,...] {{<axis>,...}}")
    names, sizes = [], []
    for part in t[len("mesh["):close].split(","):
        m = _MESH_AXIS.fullmatch(part)
        if m is None:
            raise AttributeTextError(f"replica_groups {text!r}: mesh axis {part.strip()!r} is not <name>=<size>")
        names.append(m.group(1))
        sizes.append(int(m.group(2)))
    count = int(np.prod(sizes))
    between = t[close + 1:brace].strip()
    if between:
        m = re.fullmatch(r",\s*device_ids\s*=\s*\((.*)\)", between)
        if m is None:
            raise AttributeTextError(f"replica_groups {text!r}: expected ', device_ids=(...)' after the mesh, "
                                     f"got {between!r}")
        ids_text = m.group(1).strip()
        if "<=" in ids_text:
            iota = _IOTA_GROUPS.fullmatch(ids_text)
            if iota is None:
                raise AttributeTextError(f"replica_groups {text!r}: device_ids {ids_text!r} is not an iota")
            devices = np.arange(count).reshape([int(x) for x in iota.group(2).split(",")])
            if iota.group(3):
                devices = devices.transpose([int(x) for x in iota.group(3).split(",")])
        else:
            items = [x for x in re.split(r"[\s,\[\]]+", re.sub(r"^\s*\[[\d,\s]*\]", "", ids_text)) if x]
            if not all(_INT.fullmatch(x) for x in items):
                raise AttributeTextError(f"replica_groups {text!r}: device_ids {ids_text!r} are not integers")
            devices = np.array([int(x) for x in items], np.int64)
        devices = devices.reshape(-1)
        if devices.size != count or sorted(devices.tolist()) != list(range(count)):
            raise AttributeTextError(f"replica_groups {text!r}: device_ids must list each of the {count} devices "
                                     f"of the mesh once")
    else:
        devices = np.arange(count)
    refs = []  # (mesh axis, pre-size or None, size)
    body = t[brace + 1:-1]
    for part in (body.split(",") if body.strip() else []):
        m = _AXIS_REF.fullmatch(part)
        if m is None or m.group(1) not in names:
            raise AttributeTextError(f"replica_groups {text!r}: {part.strip()!r} is not an axis of the mesh "
                                     f"{names}")
        axis = names.index(m.group(1))
        if m.group(2) is None:
            refs.append((axis, None, sizes[axis]))
            continue
        pre, size = int(m.group(2)), int(m.group(3))
        if pre < 1 or size < 1 or sizes[axis] % (pre * size):
            raise AttributeTextError(f"replica_groups {text!r}: sub-axis {part.strip()!r} does not divide the "
                                     f"axis size {sizes[axis]}")
        refs.append((axis, pre, size))
    # Each grouped mesh axis is split into dimensions (sub-axes and the gaps between them); the groups are the
    # device array over those dimensions, the grouped ones moved last in the order the axes are listed.
    dims, grouped_of_ref = [], [None] * len(refs)
    for axis, full in enumerate(sizes):
        mine = [i for i, r in enumerate(refs) if r[0] == axis]
        if not mine:
            dims.append(full)
            continue
        if len(mine) == 1 and refs[mine[0]][1] is None:
            grouped_of_ref[mine[0]] = len(dims)
            dims.append(full)
            continue
        if any(refs[i][1] is None for i in mine):
            raise AttributeTextError(f"replica_groups {text!r}: axis {names[axis]!r} is listed whole and in parts")
        product = 1
        for i in sorted(mine, key=lambda i: refs[i][1]):
            pre, size = refs[i][1], refs[i][2]
            if pre % product:
                raise AttributeTextError(f"replica_groups {text!r}: sub-axes of {names[axis]!r} overlap")
            if pre != product:
                dims.append(pre // product)
                product = pre
            grouped_of_ref[i] = len(dims)
            dims.append(size)
            product *= size
        if full % product:
            raise AttributeTextError(f"replica_groups {text!r}: sub-axes of {names[axis]!r} do not divide it")
        if product != full:
            dims.append(full // product)
    grouped = list(grouped_of_ref)
    if len(set(grouped)) != len(grouped):
        raise AttributeTextError(f"replica_groups {text!r}: an axis is listed twice")
    order = [d for d in range(len(dims)) if d not in grouped] + grouped
    size = int(np.prod([dims[d] for d in grouped])) if grouped else 1
    return devices.reshape(dims).transpose(order).reshape(-1, size).tolist()


def format_int_lists(groups: Sequence[Sequence[int]]) -> str:
    return "{" + ",".join("{" + ",".join(str(int(i)) for i in g) + "}" for g in groups) + "}"


def format_ints(values) -> str:
    return "{" + ",".join(str(int(v)) for v in values) + "}"


_META_ITEM = re.compile(r'\s*([A-Za-z_]\w*)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s}]+)')


def key_values(text: str) -> dict[str, str]:
    """``{op_name="a b" source_line=3}`` (or comma-separated) -> {'op_name': '"a b"', 'source_line': '3'}."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise AttributeTextError(f"expected {{key=value ...}}, got {text[:60]!r}")
    body = t[1:-1]
    out: dict[str, str] = {}
    pos = 0
    while True:
        while pos < len(body) and body[pos] in " ,\n\t":
            pos += 1
        if pos >= len(body):
            return out
        m = _META_ITEM.match(body, pos)
        if m is None:
            raise AttributeTextError(f"malformed {{key=value}} list at {body[pos:pos + 30]!r}")
        out[m.group(1)] = m.group(2)
        pos = m.end()


def format_key_values(items: dict[str, str], sep: str = " ") -> str:
    return "{" + sep.join(f"{k}={v}" for k, v in items.items()) + "}"


# ----------------------------------------------------------------------------
# Literals
# ----------------------------------------------------------------------------

_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_NUMBER = re.compile(r"[-+]?(?:nan(?:\(0x[0-9a-fA-F]+\))?|inf|\d[\w.+\-]*|\.\d[\w.+\-]*)|true|false", re.ASCII)


def literal_values(text: str, dtype: np.dtype, kind: str, count: int, type_name: str | None = None) -> np.ndarray:
    """The ``count`` values of an array literal (``{ {1, 2}, {3, 4} }``, ``-inf``, ``(1, 2)`` for complex);
    ``type_name`` (XLA's, such as ``u64``) names the element type in messages."""
    body = _COMMENT.sub(" ", text)
    if "..." in body:
        raise AttributeTextError("the literal is elided ('{...}'): the text was printed without large constants")
    tokens = _NUMBER.findall(body)
    rest = _NUMBER.sub(" ", body)
    if re.search(r"[^\s{}(),]", rest):
        bad = re.search(r"[^\s{}(),]+", rest).group()
        raise AttributeTextError(f"unexpected {bad!r} in the literal")
    per = 2 if kind == "complex" else 1
    if len(tokens) != count * per:
        raise AttributeTextError(f"the literal has {len(tokens) // per if per == 2 else len(tokens)} values, "
                                 f"the shape needs {count}")
    if kind == "pred":
        return np.array([t in ("true", "1") for t in tokens], dtype=np.bool_)
    if kind in ("sint", "uint"):
        try:
            values = [int(t) for t in tokens]
        except ValueError:
            raise AttributeTextError(f"expected integers in the literal, got {tokens[:3]}") from None
        lo, hi = _int_range(dtype)
        bad = next((v for v in values if v < lo or v > hi), None)
        if bad is not None:
            raise AttributeTextError(f"constant {bad} is out of range for {type_name or dtype} ({lo} to {hi})")
        return np.array(values, dtype=np.int64 if kind == "sint" else np.uint64).astype(dtype)
    big = next((t for t in tokens if t.lstrip("+-").isdigit() and not -2**63 <= int(t) < 2**64), None)
    if big is not None:  # XLA's lexer reads an integer token as a 64-bit integer
        raise AttributeTextError(f"the integer {big} in the literal is beyond 64 bits (write it as a float: "
                                 f"{float(big):.17g})")
    floats = np.array([_float(t) for t in tokens], dtype=np.float64)
    if kind == "complex":
        wide = floats[0::2] + 1j * floats[1::2]
        return wide.astype(dtype)
    nan_payload = [i for i, t in enumerate(tokens) if "nan(" in t]
    out = floats.astype(dtype)
    for i in nan_payload:  # a NaN with a given payload: set the mantissa bits exactly
        out[i:i + 1] = _nan_with_payload(tokens[i], dtype)
    return out


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype, sub-byte ml_dtypes (int4, uint2, ...) included."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
    else:
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def _float(token: str) -> float:
    t = token.lower()
    sign = -1.0 if t.startswith("-") else 1.0
    t = t.lstrip("+-")
    if t.startswith("nan"):
        return float("nan") * (1 if sign > 0 else -1)
    if t == "inf":
        return sign * float("inf")
    try:
        return sign * float(t)
    except ValueError:
        raise AttributeTextError(f"expected a number in the literal, got {token!r}") from None


def _nan_with_payload(token: str, dtype: np.dtype) -> np.ndarray:
    payload = int(token[token.index("(") + 1:-1], 16)
    bits = dtype.itemsize * 8
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    info_bits = {np.dtype(np.float16): 10, np.dtype(np.float32): 23, np.dtype(np.float64): 52}.get(np.dtype(dtype))
    if info_bits is None:
        import ml_dtypes

        info_bits = ml_dtypes.finfo(dtype).nmant
    exponent_mask = ((1 << (bits - 1)) - 1) & ~((1 << info_bits) - 1)
    value = exponent_mask | (payload & ((1 << info_bits) - 1))
    if token.startswith("-"):
        value |= 1 << (bits - 1)
    return np.array([value], dtype=uint).view(dtype)


def format_literal(array: np.ndarray, kind: str) -> str:
    """An array literal as XLA prints it: ``{ {1, 2}, {3, 4} }``; scalars bare."""
    if array.ndim == 0:
        return _scalar_text(array.reshape(()), kind)
    flat = [_scalar_text(v, kind) for v in array.reshape(-1)]

    def nest(dims, start):
        if len(dims) == 1:
            return "{" + ", ".join(flat[start:start + dims[0]]) + "}", start + dims[0]
        parts = []
        for _ in range(dims[0]):
            text, start = nest(dims[1:], start)
            parts.append(text)
        return "{ " + ", ".join(parts) + " }", start

    if array.size == 0:
        return "{" * array.ndim + "}" * array.ndim if array.ndim else "{}"
    return nest(list(array.shape), 0)[0]


def _scalar_text(value, kind: str) -> str:
    if kind == "pred":
        return "true" if bool(value) else "false"
    if kind in ("sint", "uint"):
        return str(int(value))
    if kind == "complex":
        return f"({_float_text(value.real)}, {_float_text(value.imag)})"
    return _float_text(value)


def _float_text(value) -> str:
    v = np.asarray(value)
    f = float(v)
    if np.isnan(f):
        bits = v.dtype.itemsize * 8
        uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[v.dtype.itemsize]
        raw = int(v.reshape(1).view(uint)[0])
        sign = "-" if raw >> (bits - 1) else ""
        try:
            import ml_dtypes

            nmant = ml_dtypes.finfo(v.dtype).nmant
        except Exception:
            nmant = np.finfo(v.dtype).nmant
        payload = raw & ((1 << nmant) - 1)
        quiet = 1 << (nmant - 1) if nmant else 0
        return f"{sign}nan" if payload == quiet else f"{sign}nan(0x{payload:x})"
    if np.isinf(f):
        return "-inf" if f < 0 else "inf"
    text = repr(v.item()) if v.dtype in (np.float32, np.float64, np.float16) else repr(f)
    if v.dtype == np.float32:
        text = str(np.float32(v))
    elif v.dtype == np.float16:
        text = str(np.float16(v))
    elif v.dtype not in (np.float64,):
        text = _shortest(v)
    if text.endswith(".0"):
        text = text[:-2]
    return text


def _shortest(v: np.ndarray) -> str:
    """Shortest decimal that reads back to the same value of ``v``'s (narrow) dtype."""
    f = float(v)
    for digits in range(1, 18):
        text = f"{f:.{digits}g}"
        if np.array(float(text)).astype(v.dtype) == v:
            return text
    return repr(f)
