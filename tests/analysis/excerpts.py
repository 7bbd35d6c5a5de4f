"""Excerpts of real captures, made the way users make them: lower log levels and cuts at both ends.

``at_levels`` keeps only the records Envoy would have written at a lower ``-l`` (a trace capture filtered to
its debug/info records, header dumps kept with their record); ``cut`` keeps a range of records. Both take the
lines verbatim from a lab capture, so its truth files (access.jsonl) still apply: ``excerpt_truth`` writes
the excerpt next to copies of them.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
from truth import Truth, capture_of

LEVELS = ("trace", "debug", "info", "warning", "error", "critical")


def log_lines(log: Path) -> list[str]:
    raw = gzip.decompress(log.read_bytes()) if log.suffix == ".gz" else log.read_bytes()
    return raw.decode("utf-8").split("\n")


def record_spans(t: Truth) -> pl.DataFrame:
    """``line_no``, ``n_lines``, ``level``, ``kind``, ``conn_id``, ``stream_id`` of every record of a capture."""
    cap = capture_of(t.log, t.log_format)
    rest = pl.col("message").str.replace(r"^\[(C\d+\]\[S\d+|C\d+|Tags: [^\]]*)\] ", "")
    return cap.events.select("line_no", "n_lines", "level", "kind", "conn_id", "stream_id", "ts_us",
                             rest.alias("rest")).sort("line_no")


def _text(lines: list[str], keep: list[tuple[int, int]]) -> str:
    out: list[str] = []
    for first, n in keep:
        out.extend(lines[first - 1:first - 1 + n])
    return "\n".join(out) + "\n"


def at_levels(t: Truth, lowest: str, without: tuple[str, ...] = ()) -> str:
    """The capture's log as Envoy would have written it at ``-l lowest`` (records below it dropped), also
    without records whose message starts with one of ``without`` (lines older Envoys do not print)."""
    allowed = set(LEVELS[LEVELS.index(lowest):])
    spans = record_spans(t).filter(pl.col("level").is_in(list(allowed)))
    if without:
        spans = spans.filter(~pl.any_horizontal(pl.col("rest").str.starts_with(w) for w in without))
    return _text(log_lines(t.log), list(spans.select("line_no", "n_lines").iter_rows()))


def cut(t: Truth, first_line: int, last_line: int | None = None, lowest: str = "trace") -> str:
    """Records starting within [first_line, last_line] (and at ``lowest`` level or above), verbatim."""
    allowed = set(LEVELS[LEVELS.index(lowest):])
    spans = record_spans(t).filter(pl.col("level").is_in(list(allowed)) & (pl.col("line_no") >= first_line))
    if last_line is not None:
        spans = spans.filter(pl.col("line_no") <= last_line)
    return _text(log_lines(t.log), list(spans.select("line_no", "n_lines").iter_rows()))


def excerpt_truth(t: Truth, text: str, out_dir: Path) -> Truth:
    """A capture directory holding ``text`` as envoy.log and copies of ``t``'s truth files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "envoy.log").write_text(text, encoding="utf-8")
    for name in ("access.jsonl", "client.jsonl", "upstream.jsonl"):
        shutil.copy2(t.dir / name, out_dir / name)
    meta = dict(t.meta)
    (out_dir / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return Truth(out_dir, out_dir / "envoy.log", meta)
