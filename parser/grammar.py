"""The grammar as a function: one message in, its kind and the character spans of its fields out.

This is the reference classifier. The fast path (``classify.py``) calls it once
per distinct message *shape*; the slow path calls it once per record.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from antlr4 import CommonTokenStream, InputStream, ParserRuleContext, Token
from antlr4.atn.PredictionMode import PredictionMode
from antlr4.error.ErrorListener import ErrorListener
from antlr4.error.Errors import ParseCancellationException
from antlr4.error.ErrorStrategy import BailErrorStrategy

from envoy_dissector.parser.grammar_names import RULE_NAMES

if TYPE_CHECKING:
    from envoy_dissector.parser.generated.EnvoyLogLexer import EnvoyLogLexer
    from envoy_dissector.parser.generated.EnvoyLogParser import EnvoyLogParser

UNKNOWN = "unknown"
_CTX_ATTRIBUTES = frozenset({"parentCtx", "invokingState", "children", "start", "stop", "exception", "parser"})


def snake_case(rule_name: str) -> str:
    """``h2SentFrame`` -> ``h2_sent_frame``; rule names are the kind contract."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", rule_name).lower()


def _rules_between(first: str, last: str) -> tuple[str, ...]:
    return RULE_NAMES[RULE_NAMES.index(first) + 1 : RULE_NAMES.index(last)]


#: Kinds of request-lifecycle messages, in grammar order.
LIFECYCLE_KINDS: tuple[str, ...] = tuple(snake_case(r) for r in _rules_between("lifecycle", "noise"))
#: Kinds of recognised messages the analysis does not use, plus ``background`` (quiet loggers).
NOISE_KINDS: tuple[str, ...] = tuple(snake_case(r) for r in _rules_between("noise", "unknownMessage")) + ("background",)
#: Every value the ``kind`` column can take.
ALL_KINDS: tuple[str, ...] = LIFECYCLE_KINDS + NOISE_KINDS + (UNKNOWN,)


@dataclass(frozen=True, slots=True)
class MessageParse:
    """What the grammar says about one ``LOGGER \\t MESSAGE`` text."""

    kind: str
    #: field name -> (start, stop) character span in the parsed text, stop exclusive
    spans: tuple[tuple[str, int, int], ...]
    #: spans matched by a catch-all (``rest`` / ``anything``) in the rule of a recognised message:
    #: their content cannot change the parse (the fast path need not compare values there)
    free: tuple[tuple[int, int], ...] = ()

    def values(self, text: str) -> dict[str, str]:
        return {name: text[a:b] for name, a, b in self.spans}


class _Silent(ErrorListener):
    def syntaxError(self, recognizer: object, offendingSymbol: object, line: int, column: int, msg: str,
                    e: Exception | None) -> None:
        pass


_SILENT = _Silent()


@cache
def _generated() -> tuple[type[EnvoyLogLexer], type[EnvoyLogParser]]:
    """The ANTLR lexer and parser, imported on first use: the import deserializes their ATNs (~0.35 s), which
    a run whose shapes all come from the shape cache never needs (``preload`` starts it early otherwise)."""
    from envoy_dissector.parser.generated.EnvoyLogLexer import EnvoyLogLexer
    from envoy_dissector.parser.generated.EnvoyLogParser import EnvoyLogParser
    return EnvoyLogLexer, EnvoyLogParser


def preload() -> None:
    """Import the ANTLR lexer and parser in the background (a parse run starts this: the first chunk's shapes
    need them after its envelope is split, and the envelope's polars work leaves the interpreter free)."""
    if _generated.cache_info().currsize == 0:
        threading.Thread(target=_generated, name="grammar-import", daemon=True).start()


def _parse_tree(text: str) -> EnvoyLogParser.LineContext:
    lexer_class, parser_class = _generated()
    lexer = lexer_class(InputStream(text))
    lexer.removeErrorListeners()
    tokens = CommonTokenStream(lexer)
    parser = parser_class(tokens)
    parser.removeErrorListeners()
    parser._interp.predictionMode = PredictionMode.SLL
    parser._errHandler = BailErrorStrategy()
    try:
        return parser.line()
    except ParseCancellationException:
        # SLL is exact for almost every input; full LL settles the rest.
        tokens.seek(0)
        parser = parser_class(tokens)
        parser.removeErrorListeners()
        parser.addErrorListener(_SILENT)
        parser._interp.predictionMode = PredictionMode.LL
        return parser.line()


def _span(node: object) -> tuple[int, int] | None:
    if isinstance(node, Token):
        return node.start, node.stop + 1
    if isinstance(node, ParserRuleContext):
        if node.start is None:
            return None
        if node.stop is None or node.stop.tokenIndex < node.start.tokenIndex:
            return node.start.start, node.start.start  # empty match, e.g. an empty `rest`
        return node.start.start, node.stop.stop + 1
    return None


def _labels(ctx: ParserRuleContext) -> list[tuple[str, int, int]]:
    out = []
    for name, value in vars(ctx).items():
        if name in _CTX_ATTRIBUTES or value is None:
            continue
        span = _span(value)
        if span is not None:
            out.append((name.rstrip("_"), *span))  # ANTLR renames labels that shadow builtins (filter -> filter_)
    return out


@lru_cache(maxsize=65536)
def parse_message(text: str) -> MessageParse:
    """Classify one ``LOGGER \\t FIRST_LINE`` text with the grammar.

    >>> parse_message('connection\\t[C7] read returns: 113').values('connection\\t[C7] read returns: 113')
    {'conn_id': '7', 'bytes': '113'}
    """
    tree = _parse_tree(text)
    spans: list[tuple[str, int, int]] = []
    if tree.prefix() is not None:
        spans += _labels(tree.prefix())
    known = tree.known()
    if known is not None:
        group = known.lifecycle() or known.noise()
        leaf = group.getChild(0) if group is not None else None
        if not isinstance(leaf, ParserRuleContext):
            return MessageParse(UNKNOWN, tuple(spans))
        kind = snake_case(RULE_NAMES[leaf.getRuleIndex()])
        spans += _labels(leaf)
        parser = _generated()[1]
        free = tuple(span for child in leaf.getChildren()
                     if isinstance(child, (parser.RestContext, parser.AnythingContext))
                     and (span := _span(child)) is not None)
        return MessageParse(kind, tuple(spans), free)
    if tree.quietLogger() is not None:
        return MessageParse("background", tuple(spans))
    return MessageParse(UNKNOWN, tuple(spans))
