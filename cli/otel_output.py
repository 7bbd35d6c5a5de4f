"""``analyze``'s OpenTelemetry outputs: ``-o FILE.otlp.json`` and ``--otlp-endpoint URL`` (docs/otel.md).

The OpenTelemetry packages are the ``[otel]`` extra, imported only when one of these is asked for. The spans need
the trace headers each request arrived with: a capture that holds its events (``--keep-events``) gives them; else its
files' header dumps are read once more, and input that cannot be read twice (stdin) keeps its events as it is read.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.cli.extras import require_extra
from envoy_dissector.cli.parse import redaction_of
from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.errors import UsageError
from envoy_dissector.parser.sources import Source

OTLP_SUFFIX = ".otlp.json"  # (analysis/outputs/otel.py's, without importing the extra to know it)


def add_otel_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--otlp-endpoint", metavar="URL",
                   help="also send each client request as an OpenTelemetry span tree over OTLP/HTTP to URL "
                        "(a collector, Jaeger or Tempo: http://127.0.0.1:4318; docs/otel.md); "
                        "-o FILE.otlp.json writes the same spans as OTLP/JSON")


@dataclass(frozen=True)
class OtelOutputs:
    """What of the OpenTelemetry export this run asked for."""

    files: tuple[str, ...] = ()
    endpoint: str | None = None

    def __bool__(self) -> bool:
        return bool(self.files) or self.endpoint is not None

    def claims(self, output: str) -> bool:
        """Whether ``-o output`` is an OpenTelemetry file (the other writers leave it alone)."""
        return output.endswith(OTLP_SUFFIX)

    def needs_whole(self, sources: Sequence[Source]) -> bool:
        """Whether the capture must keep its events as it is read: its input cannot be read twice for the trace
        headers."""
        return bool(self) and not all(s.path is not None and s.path.is_file() for s in sources)

    def export(self, capture: Capture, sources: Sequence[Source], args: argparse.Namespace) -> None:
        if not self:
            return
        from envoy_dissector.analysis.outputs.otel import send_otlp, trace_contexts_of, write_otlp_json
        from envoy_dissector.analysis.outputs.trace_context import read_contexts

        redact = redaction_of(args)
        # (events in memory: read from them; else the files' header dumps are read again, not their whole events)
        contexts = (trace_contexts_of(capture) if capture.holds_events
                    else read_contexts(list(sources), format=args.format, log_format=args.log_format, redact=redact,
                                       shapes=shape_cache))
        for path in self.files:
            spans = write_otlp_json(capture, path, contexts, redact=redact)
            if not args.quiet:
                print(f"wrote {path} ({spans:,} spans)", file=sys.stderr)
        if self.endpoint is not None:
            spans = send_otlp(capture, self.endpoint, contexts, redact=redact)
            if not args.quiet:
                print(f"sent {spans:,} spans to {self.endpoint}", file=sys.stderr)


def refuse_with_follow(args: argparse.Namespace) -> None:
    """The OpenTelemetry export needs the finished capture: not with ``--follow`` (docs/otel.md)."""
    if any(o.endswith(OTLP_SUFFIX) for o in args.output) or getattr(args, "otlp_endpoint", None):
        raise UsageError("-o *.otlp.json and --otlp-endpoint: not with --follow (export the log once it is written)")


def otel_outputs(args: argparse.Namespace) -> OtelOutputs:
    """The OpenTelemetry outputs of ``args``; checks the extra and the URL before anything is read."""
    asked = OtelOutputs(tuple(o for o in args.output if o.endswith(OTLP_SUFFIX)), getattr(args, "otlp_endpoint", None))
    if asked:
        require_extra("otel", "the OpenTelemetry export (-o *.otlp.json, --otlp-endpoint)")
        if asked.endpoint is not None:
            from envoy_dissector.analysis.outputs.otel import traces_endpoint

            traces_endpoint(asked.endpoint)
    return asked
