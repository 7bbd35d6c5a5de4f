"""Finished frames kept in memory up to a budget, then written to parquet parts in a private temporary
directory, and read back once at the end (``StreamingAnalysis`` keeps its finished requests, phases and loop
slices here, so memory stays bounded by the open working set and not by the size of the capture).

Parquet parts are compact (the finished output of a 5 GB capture is ~80 MB on disk) and read back with fresh,
contiguous buffers instead of thousands of small batches. Small captures never touch the disk.
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

#: Bytes (polars' estimate) held in memory before every held frame is written out.
MEMORY_BUDGET = 128 * 1024 * 1024


@dataclass
class _Kind:
    schema: dict[str, pl.DataType]
    held: list[pl.DataFrame] = field(default_factory=list)
    parts: list[Path] = field(default_factory=list)
    rows: int = 0


class Spill:
    """Frames of a few declared kinds, appended in order; ``take(kind)`` gives them all back as one frame."""

    def __init__(self, schemas: dict[str, dict[str, pl.DataType]], *, budget: int = MEMORY_BUDGET,
                 directory: str | Path | None = None) -> None:
        self._kinds = {name: _Kind(schema) for name, schema in schemas.items()}
        self._budget = budget
        self._parent = directory
        self._dir: Path | None = None
        self._held_bytes = 0
        self._cleanup: weakref.finalize | None = None

    def add(self, kind: str, frame: pl.DataFrame) -> None:
        """Append ``frame`` (cast to the kind's schema) to ``kind``."""
        if frame.height == 0:
            return
        store = self._kinds[kind]
        frame = frame.select(pl.col(c).cast(t) for c, t in store.schema.items())
        store.held.append(frame)
        store.rows += frame.height
        self._held_bytes += int(frame.estimated_size())
        if self._held_bytes > self._budget:
            self._write_held()

    def rows(self, kind: str) -> int:
        return self._kinds[kind].rows

    @property
    def parts(self) -> int:
        """Parquet parts written so far (0: everything is still in memory)."""
        return sum(len(k.parts) for k in self._kinds.values())

    def take(self, kind: str) -> pl.DataFrame:
        """Every frame of ``kind`` in the order added, as one frame; the kind is emptied.

        Read back from parts, each column is one chunk, read a column at a time: a frame of many parts would be
        copied whole by the first step that adds a column to it (its columns must be chunked alike), and a
        rechunk of the whole frame holds it twice."""
        store = self._kinds[kind]
        parts, held = store.parts, store.held
        self._held_bytes -= sum(int(f.estimated_size()) for f in held)
        store.held, store.parts, store.rows = [], [], 0
        if not parts:
            return pl.concat(held, rechunk=False) if held else pl.DataFrame(schema=store.schema)
        columns = [pl.concat([*(pl.read_parquet(part, columns=[name]).to_series() for part in parts),
                              *(frame[name] for frame in held)], rechunk=True) for name in store.schema]
        for part in parts:
            part.unlink(missing_ok=True)
        return pl.DataFrame(columns)

    def close(self) -> None:
        """Remove the temporary directory (also done when the spill is garbage-collected)."""
        if self._cleanup is not None:
            self._cleanup()
        self._dir = None
        for store in self._kinds.values():
            store.held, store.parts, store.rows = [], [], 0

    def _write_held(self) -> None:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="envoy-dissect-spill-", dir=self._parent))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        for name, store in self._kinds.items():
            if not store.held:
                continue
            part = self._dir / f"{name}-{len(store.parts):06d}.parquet"
            frame = pl.concat(store.held) if len(store.held) > 1 else store.held[0]
            frame.write_parquet(part, compression="lz4", statistics=False)
            store.parts.append(part)
            store.held = []
        self._held_bytes = 0
