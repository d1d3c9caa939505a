"""A structural check of MLIR bytecode / StableHLO portable artifacts before jaxlib reads them.

jaxlib's bytecode reader is C++ that trusts its input: a producer string that is not UTF-8 aborts the
whole process (SIGABRT), and corrupted sections can make it fail in unhelpful ways. This module walks
the container format in Python first (magic, version, producer, then every section's id, length and
alignment padding, which must end exactly at the end of the data), so that such input is an
:class:`~xla_dialect.errors.MlirParseError` naming the byte offset, and only well-framed bytecode
reaches jaxlib. It does not decode the sections' contents.

Format (MLIR's BytecodeFormat): ``"ML\\xefR"``, a varint version, a NUL-terminated producer string,
then sections: a byte ``id | aligned << 7``, a varint length, for aligned sections a varint alignment
followed by 0xCB padding bytes up to it, then the section's bytes. Varints are "prefix varints": the
number of trailing zero bits of the first byte plus one is their length in bytes (a 0 byte: 9 bytes).
"""

from __future__ import annotations

from xla_dialect.errors import MlirParseError

MAGIC = b"ML\xefR"
SECTION_COUNT = 9  # String, Dialect, AttrType, AttrTypeOffset, IR, Resource, ResourceOffset, DialectVersions, Properties
REQUIRED_SECTIONS = frozenset(range(7))
MAX_PRODUCER = 1024
MAX_VERSION = 64


def _fail(offset: int, message: str):
    raise MlirParseError(f"MLIR bytecode: {message} at byte {offset}")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(data):
        _fail(pos, "truncated (a number expected)")
    first = data[pos]
    if first & 1:
        return first >> 1, pos + 1
    if first == 0:
        if pos + 9 > len(data):
            _fail(pos, "truncated 9-byte number")
        return int.from_bytes(data[pos + 1:pos + 9], "little"), pos + 9
    size = (first & -first).bit_length()
    if pos + size > len(data):
        _fail(pos, f"truncated {size}-byte number")
    return int.from_bytes(data[pos:pos + size], "little") >> size, pos + size


def check_bytecode(data: bytes) -> None:
    """Raise :class:`MlirParseError` unless ``data`` is well-framed MLIR bytecode (see the module doc)."""
    if not data.startswith(MAGIC):
        _fail(0, "no magic number 'ML\\xefR'")
    version, pos = _varint(data, len(MAGIC))
    if version > MAX_VERSION:
        _fail(len(MAGIC), f"version {version} is not one jaxlib reads")
    end = data.find(b"\0", pos, pos + MAX_PRODUCER)
    if end < 0:
        _fail(pos, "the producer string has no terminating NUL")
    try:
        data[pos:end].decode("utf-8")
    except UnicodeDecodeError:
        _fail(pos, "the producer string is not UTF-8")
    pos = end + 1
    seen: set[int] = set()
    while pos < len(data):
        start = pos
        section, aligned = data[pos] & 0x7F, data[pos] >> 7
        if section >= SECTION_COUNT:
            _fail(start, f"unknown section id {section}")
        if section in seen:
            _fail(start, f"section {section} appears twice")
        seen.add(section)
        length, pos = _varint(data, pos + 1)
        if aligned:
            alignment, pos = _varint(data, pos)
            if alignment < 1 or alignment & (alignment - 1) or alignment > 4096:
                _fail(pos, f"section {section} has alignment {alignment} (a power of two up to 4096 expected)")
            while pos % alignment:
                if pos >= len(data) or data[pos] != 0xCB:
                    _fail(pos, f"section {section}'s alignment padding is not 0xCB bytes")
                pos += 1
        if length > len(data) - pos:
            _fail(start, f"section {section} claims {length} bytes, {len(data) - pos} remain")
        pos += length
    missing = REQUIRED_SECTIONS - seen
    if missing:
        _fail(len(data), f"sections {sorted(missing)} are missing")
