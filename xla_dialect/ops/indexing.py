"""hlo ops. Indexing: gather, scatter, dynamic_slice, dynamic_update_slice."""

from __future__ import annotations

OPS: list = []


class IndexingBuilder:
    """Builder methods of the indexing family."""
