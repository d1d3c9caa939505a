"""Program files as the commands and the Python loaders read them: every bad file is an XlaError naming the
file, the line and column where there is one, and what is wrong (issue 29)."""

from __future__ import annotations

import numpy as np
import pytest

from xla_dialect.errors import XlaError

HLO_VERIFY = """func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = hlo.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = hlo.add %0, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<3xf32>
  func.return %x : tensor<2xf32>
}
"""
HLO_UNDEFINED = HLO_VERIFY.replace("%0, %x", "%0, %y").replace("tensor<3xf32>", "tensor<2xf32>")
STABLEHLO_UNKNOWN = """func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %x, %x : tensor<2xf32>
  %1 = stablehlo.bogus %0 : tensor<2xf32>
  return %1 : tensor<2xf32>
}
"""
STABLEHLO_NEWER = """func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "stablehlo.frobnicate"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
"""

BAD_FILES = {
    # name: (content, what the message must say after the file name)
    "empty.mlir": (b"", "empty.mlir: the file is empty"),
    "blank.mlir": (b" \n\n", "blank.mlir: the file is empty (only whitespace)"),
    "verify.mlir": (HLO_VERIFY.encode(), "verify.mlir:3:3: hlo.add: result #0 has type f32[3]"),
    "undefined.mlir": (HLO_UNDEFINED.encode(), "undefined.mlir:3:20: values used but not defined: [%y]"),
    "unknown.mlir": (STABLEHLO_UNKNOWN.encode(),
                     "unknown.mlir:3:8: cannot parse the StableHLO text: custom op 'stablehlo.bogus' is unknown"),
    "newer.mlir": (STABLEHLO_NEWER.encode(), "at newer.mlir:2:8: stablehlo.frobnicate is neither"),
    "truncated.mlirbc": (b"ML\xefR\x00garbage", "truncated.mlirbc: MLIR bytecode: truncated"),
    "missing.mlir": (None, "missing.mlir: cannot read it: No such file or directory"),
}


@pytest.fixture
def bad_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # messages show the path as given: a bare file name here
    for name, (content, _) in BAD_FILES.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
    return BAD_FILES


@pytest.mark.parametrize("command", ["xla-run", "xla-opt"])
def test_commands_name_the_file_line_and_column(bad_files, command, capsys):
    from interop.tools.cli import xla_run_main
    from interop.tools.xla_opt import main as xla_opt_main

    run = xla_run_main if command == "xla-run" else xla_opt_main
    for name, (_, expected) in bad_files.items():
        assert run([name]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith(f"{command}: error: ") and expected in err, (name, err)
        assert "Traceback" not in err and "<unknown>" not in err and '"-"' not in err, (name, err)


def test_python_loaders_name_the_source(tmp_path):
    from interop import import_jax, import_stablehlo
    from interop import load_program
    from xla_dialect import parse_module

    cases = [
        (lambda: parse_module(HLO_VERIFY, "prog.mlir"), "prog.mlir:3:3: hlo.add"),
        (lambda: parse_module(HLO_UNDEFINED), "<string>:3:20: values used but not defined"),
        (lambda: parse_module(""), "<string>: the input is empty"),
        (lambda: import_stablehlo(STABLEHLO_UNKNOWN, filename="prog.mlir"), "prog.mlir:3:8: cannot parse"),
        (lambda: import_stablehlo(b""), "<string>: the input is empty"),
        (lambda: import_jax(b""), "import_jax: <bytes>: the input is empty"),
        (lambda: import_jax(b"\x01\x02\x03"), "import_jax: the bytes are not a program"),
        (lambda: load_program(str(tmp_path / "nothing.mlir")), "nothing.mlir: cannot read it"),
    ]
    for call, expected in cases:
        with pytest.raises(XlaError) as info:
            call()
        assert expected in str(info.value), (expected, str(info.value))
    (tmp_path / "empty.hlo").write_bytes(b"")
    with pytest.raises(XlaError, match="empty.hlo: the file is empty"):
        load_program(str(tmp_path / "empty.hlo"))


def test_a_good_file_still_loads(tmp_path):
    from interop import load_program

    (tmp_path / "ok.mlir").write_text(HLO_VERIFY.replace("tensor<3xf32>", "tensor<2xf32>"))
    import lowering

    (out,) = lowering.compile(load_program(str(tmp_path / "ok.mlir")))(np.ones(2, np.float32))
    assert out.tolist() == [1.0, 1.0]


def test_one_loader_and_one_list_of_formats(tmp_path, capsys):
    """xla-opt reads what xla-run runs (a serialized jax export included), through the same function, and
    both --help texts list the same formats."""
    import jax
    import jax.numpy as jnp

    import interop
    import interop.tools.cli
    import interop.tools.xla_opt
    from interop.programs import FORMATS, load_program

    x = np.linspace(0, 1, 3, dtype=np.float32)
    exported = jax.export.export(jax.jit(lambda a: jnp.sin(a) * 2))(x)
    (tmp_path / "prog.bin").write_bytes(exported.serialize())
    np.savez(tmp_path / "in.npz", arg0=x)
    assert interop.tools.xla_opt.main([str(tmp_path / "prog.bin")]) == 0
    assert "hlo.sine" in capsys.readouterr().out
    assert interop.tools.cli.xla_run_main([str(tmp_path / "prog.bin"), "--inputs", str(tmp_path / "in.npz")]) == 0
    capsys.readouterr()
    assert interop.load_program is load_program is interop.tools.cli.load_program
    assert not hasattr(interop.tools.xla_opt, "read_program")
    for main in (interop.tools.cli.xla_run_main, interop.tools.xla_opt.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        for fmt in FORMATS:
            assert " ".join(fmt.split()) in text, (main, fmt)
        assert "HLO module text" in text and "serialized jax.export" in text
