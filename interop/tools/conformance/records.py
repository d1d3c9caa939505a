"""What the conformance runner passes around: a corpus :class:`Program`, its :class:`Result`, the
:data:`STATUSES`, and :class:`ConformanceError` for programs it cannot run."""

from __future__ import annotations

from dataclasses import dataclass

from xla_dialect.errors import XlaError



STATUSES = ("passed", "failed", "error", "skipped", "disabled")


class ConformanceError(XlaError):
    """A corpus program cannot be run (malformed check ops, unsupported harness feature)."""


@dataclass
class Program:
    """One program of the corpus: a whole file or one ``// -----`` chunk of it."""

    path: str
    name: str
    mode: str  # 'run' (execute and check), 'roundtrip', 'disabled', 'skip'
    text: str = ""
    line: int = 0  # first line of the chunk in its file (0-based), for messages
    args: str | None = None  # --args list of the RUN line
    expected: list[str] | None = None  # printed results (FileCheck lines) as dense literals
    message: str = ""  # why it is disabled / skipped
    family: str = ""
    entry: str | None = None  # the function to run (a chunk with several checked functions and no @main)


@dataclass
class Result:
    """The outcome of one program."""

    path: str
    name: str
    status: str  # one of STATUSES
    message: str = ""
    seconds: float = 0.0
    family: str = ""
