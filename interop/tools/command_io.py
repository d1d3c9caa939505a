"""What the commands share: reading ``--inputs`` files, describing and summarizing results, writing
``--json`` reports, a quiet exit when stdout's reader goes away (``xla-opt ... | head``)."""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np

from xla_dialect.errors import XlaError

from ..comparison import json_number


def read_npz(path: str | None) -> list[np.ndarray] | None:
    """The arrays of an ``.npz`` file, named ``arg0, arg1, ...`` (every index from 0 present) or, when no
    name has that form, in file order. Anything else (a ``.npy`` or another file, object arrays, gaps
    such as arg0 and arg2, a mix of names) is an :class:`XlaError` naming the file."""
    if path is None:
        return None
    import zipfile

    if not os.path.isfile(path):
        raise XlaError(f"--inputs {path}: no such file")
    if not zipfile.is_zipfile(path):
        kind = "a .npy file (one array)" if is_npy(path) else "not an .npz file"
        raise XlaError(f"--inputs {path}: {kind}; expected an .npz archive such as np.savez(path, arg0=x, arg1=y)")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise XlaError(f"--inputs {path}: cannot read it as .npz ({e})") from None
    with data:
        names = list(data.files)
        numbered = {n: int(n[3:]) for n in names if re.fullmatch(r"arg[0-9]+", n)}
        if numbered:
            if len(numbered) != len(names):
                others = sorted(set(names) - set(numbered))
                raise XlaError(f"--inputs {path}: mixes arrays named arg0, arg1, ... with others ({', '.join(others)})")
            missing = sorted(set(range(len(names))) - set(numbered.values()))
            if missing:
                raise XlaError(f"--inputs {path}: arrays {', '.join(sorted(names))} leave arg{missing[0]} out; "
                               "name them arg0, arg1, ... without gaps")
            names = sorted(names, key=numbered.get)
        arrays = []
        for n in names:
            try:
                arrays.append(data[n])
            except ValueError as e:  # object arrays need pickle, which is refused
                raise XlaError(f"--inputs {path}: array {n} cannot be loaded ({e})") from None
        return arrays


def is_npy(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(6) == b"\x93NUMPY"
    except OSError:
        return False


def describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    return type(value).__name__


def result_summary(index: int, value) -> dict:
    """One result of the run as JSON: dtype and shape, and for real numbers the range of the finite values
    and the count of NaNs."""
    if not isinstance(value, (np.ndarray, np.generic)):
        return {"index": index, "kind": type(value).__name__}
    a = np.asarray(value)
    summary = {"index": index, "kind": "array", "dtype": str(a.dtype), "shape": list(a.shape)}
    if a.dtype.kind in "biuf" or a.dtype.kind == "V" and a.dtype.itemsize <= 2:
        try:
            wide = a.astype(np.float64)
        except (TypeError, ValueError):
            return summary
        finite = wide[np.isfinite(wide)]
        summary.update(nan=int(np.isnan(wide).sum()),
                       min=json_number(float(finite.min())) if finite.size else None,
                       max=json_number(float(finite.max())) if finite.size else None)
    return summary


def write_json(path: str, payload) -> None:
    """Write ``payload`` as an indented JSON file (the ``--json`` reports of the commands)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1)
        f.write("\n")


def quiet_broken_pipe() -> int:
    """After a broken pipe on stdout: point stdout at /dev/null so that Python's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0
