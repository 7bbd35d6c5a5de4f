"""Line order of one worker's lines, sorted only when it is not there already."""
from __future__ import annotations

import polars as pl


def in_order(frame: pl.DataFrame, *keys: str) -> pl.DataFrame:
    """``frame`` sorted by ``keys`` (stable). One thread's lines nearly always come in order: when every key
    column is already non-decreasing the sort would give the same rows, so none is made (a sort copies every
    column of a window)."""
    if all(frame[k].is_sorted() for k in keys):
        return frame
    return frame.sort(*keys, maintain_order=True)
