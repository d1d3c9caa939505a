"""Semantics preserved on the StableHLO conformance corpus: every program gives the same results before
and after each pipeline.

A deterministic sample runs by default; ``pytest -m slow tests/test_passes_corpus.py`` runs every
program. Without the corpus (``../shared/corpus``, or ``--corpus``-style env ``XLA_CORPUS``) the
tests are skipped. Programs the executor itself cannot run (import or run errors before any pass)
are not counted against the passes. Programs run in IEEE mode (``denormals="keep"``): the passes are
exact there, while under XLA's flush-to-zero ``fold-constants`` (IEEE, like most of XLA's constant
folder) may keep a denormal that execution would flush (lowering/runtime/denormals.py).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("XLA_CORPUS", REPO.parent / "shared" / "corpus"))
SAMPLE = int(os.environ.get("PASSES_CORPUS_SAMPLE", 60))
PIPELINES = [
    "canonicalize-broadcasts,assign-layouts{target=tpu},tile-layouts,cse,dce",
    "canonicalize-broadcasts,simplify,fold-constants,cse,dce,assign-layouts{target=cpu}",
]


def _programs():
    if not CORPUS.exists():
        return []
    from interop.tools import conformance as conf

    return [p for p in conf.discover([str(CORPUS)]) if p.mode == "run"]


def _run(program):
    """(module, entry, outputs) of a corpus program on the executor, or None when it cannot run."""
    import lowering
    from interop.tools import conformance as conf
    from interop.tools.conformance.running import _expand_quantized, _import

    try:
        text, quant = _expand_quantized(conf.normalize_checks(program.text))
        prepared = conf.prepare_module(text, program.line, program.args, program.expected)
        if prepared.parallel is not None:
            return None
        module = _import(prepared.module, quant)
        outputs = lowering.compile(module, entry=prepared.entry, **IEEE)()
    except Exception:  # noqa: BLE001 - not runnable by the executor: not the passes' business
        return None
    return module, prepared.entry, outputs


IEEE = dict(denormals="keep", xla_rewrites=False, fma_contraction=False)
"""Each op's literal IEEE semantics: what the pipelines preserve (XLA's pattern-based rewrites and FMA
contraction, on by default in lowering.compile, see other patterns once layouts and tiling change the program)."""


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.itemsize == 0 or a.dtype == object:
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)))


def _check(program):
    import lowering
    import passes

    ran = _run(program)
    if ran is None:
        pytest.skip("the executor cannot run this program")
    module, entry, expected = ran
    for pipeline in PIPELINES:
        rewritten = module.clone()
        passes.run(rewritten, pipeline)
        actual = lowering.compile(rewritten, entry=entry, **IEEE)()
        assert len(actual) == len(expected), pipeline
        for i, (x, y) in enumerate(zip(expected, actual)):
            assert _same(x, y), f"{program.path} {program.name}: {pipeline}: result {i} differs"


ALL = _programs()
_rng = random.Random(1234)
SAMPLED = _rng.sample(ALL, min(SAMPLE, len(ALL))) if ALL else []


@pytest.mark.skipif(not ALL, reason=f"no corpus at {CORPUS}")
@pytest.mark.parametrize("program", SAMPLED, ids=[f"{Path(p.path).name}:{p.name}" for p in SAMPLED])
def test_pipelines_preserve_corpus_results_sample(program):
    _check(program)


@pytest.mark.slow
@pytest.mark.skipif(not ALL, reason=f"no corpus at {CORPUS}")
@pytest.mark.parametrize("program", ALL, ids=[f"{Path(p.path).name}:{p.name}" for p in ALL])
def test_pipelines_preserve_corpus_results_all(program):
    _check(program)
