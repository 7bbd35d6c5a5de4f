"""A requests frame whose uids are not made yet, and where they are made: on the whole frame once asked for
(``made``), or a slice at a time as a writer reads it (``lazy``).

A request's uid (``ORIGIN:C<conn>:S<stream>``) repeats the origin's path on every row: ~65 bytes of text a
request, 0.8 GiB for 10 M one-line requests, more than everything else the capture holds of them. ``conclude``
leaves it as one null value (a constant column, not materialised) when asked to (``make_uids=False``) and no
step of its own reads it; the capture makes it on first access of ``Capture.requests`` and the ``-o`` writers make
it a slice at a time as they stream the rows out."""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from envoy_dissector.analysis.engine.pipeline import with_uids
from envoy_dissector.analysis.stages.requests import request_uid


@dataclass(frozen=True)
class UidsToMake:
    """``rows``: the requests frame with its ``request_uid`` column one null value, to be made from the columns
    it is made of (``requests.UID_COLUMNS``)."""

    rows: pl.DataFrame

    def made(self) -> pl.DataFrame:
        """The frame with its uids made, one chunk (``pipeline.with_uids``)."""
        return with_uids(self.rows)

    def without_uid(self) -> pl.DataFrame:
        """The frame without its uid column: for readers of other columns (one that reads the uid fails loudly
        instead of reading nulls)."""
        return self.rows.drop("request_uid")

    def lazy(self) -> pl.LazyFrame:
        """The frame with its uids as a lazy expression: a streaming sink makes them a slice at a time."""
        return self.rows.lazy().with_columns_seq(request_uid())
