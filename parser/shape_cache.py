"""The grammar's verdict per message shape, kept on disk between runs.

The fast path parses each distinct message shape once with the grammar (~2 ms each in the
Python ANTLR runtime; a capture has a few hundred shapes). Those verdicts (``ShapeRule``) depend
only on the grammar and on the code that locates fields, so they are stored in a file named after
a hash of both: a changed grammar or fast path starts from an empty table, never from stale rules.

Only *value-free* rules are stored (``value_free``): a shape whose words are all Envoy's own
(grammar literals, ``shape_words.txt``), once Envoy's own identifiers (``envoy_names.txt``: the extension names it
lists at start-up, its overload actions and load-shed points) are taken out as whole tokens. A shape holding a
word of the capture (an unlisted header value, a listener name, a secret with ``--no-redact``) is kept in memory
for the run only.

``ENVOY_DISSECTOR_CACHE_DIR`` moves the directory (default ``$XDG_CACHE_HOME/envoy-dissector`` or
``~/.cache/envoy-dissector``); ``ENVOY_DISSECTOR_CACHE=0`` turns the cache off. A missing,
unreadable or corrupt file is ignored (and rewritten).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

from envoy_dissector.parser.classify import Boundary, ShapeRule
from envoy_dissector.parser.grammar_names import LITERAL_NAMES

_SOURCES = ("EnvoyLog.g4", "grammar.py", "classify.py", "shape_cache.py", "shape_words.txt", "envoy_names.txt")
_WORD = re.compile(r"[A-Za-z_]+")
#: Envoy's start-up listing of its extensions, one category a line: ``  CATEGORY: NAME, NAME, ...``
_LISTING = re.compile(r"main\t  ([\w.]+): (.*)", re.DOTALL)
_DOTTED = re.compile(r"(?<![\w.-])[A-Za-z_][\w-]*(?:\.[\w-]+)+")
MAX_SHAPES = 100_000


def enabled() -> bool:
    return os.environ.get("ENVOY_DISSECTOR_CACHE", "1") not in ("0", "false", "no")


def cache_dir() -> Path:
    if os.environ.get("ENVOY_DISSECTOR_CACHE_DIR"):
        return Path(os.environ["ENVOY_DISSECTOR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envoy-dissector"


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """Hash of the grammar and of the code that turns its parses into rules."""
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + _source_bytes(name) + b"\0")
    return digest.hexdigest()[:16]


def _source_bytes(name: str) -> bytes:
    return resources.files("envoy_dissector.parser").joinpath(name).read_bytes()


def cache_path() -> Path:
    return cache_dir() / f"shapes-{fingerprint()}.json"


def _encode(rule: ShapeRule) -> list[object]:
    return [rule.kind, [[n, list(_b(a)), list(_b(b))] for n, a, b in rule.fields], list(rule.checked),
            list(rule.signatures), list(rule.exact), list(rule.exact_values), list(rule.forbid)]


def _b(boundary: Boundary) -> tuple[int, int, int]:
    return boundary.literal, boundary.regions, boundary.delta


def _decode(item: list) -> ShapeRule:
    kind, fields, checked, signatures, exact, exact_values, forbid = item
    return ShapeRule(str(kind), tuple((str(n), Boundary(*a), Boundary(*b)) for n, a, b in fields),
                     tuple(checked), tuple(signatures), tuple(exact), tuple(exact_values), tuple(forbid))


def load() -> dict[str, ShapeRule]:
    """The stored rules, or nothing (disabled, missing, unreadable or corrupt)."""
    if not enabled():
        return {}
    try:
        data = json.loads(cache_path().read_text())
        return {str(shape): _decode(item) for shape, item in data["rules"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Words that are Envoy's or the grammar's, never a capture's: the grammar's literals and shape_words.txt."""
    words = set()
    for literal in LITERAL_NAMES:
        words.update(_WORD.findall(literal))
    text = resources.files("envoy_dissector.parser").joinpath("shape_words.txt").read_text()
    words.update(w for line in text.splitlines() if not line.startswith("#") for w in _WORD.findall(line))
    return frozenset(words)


@lru_cache(maxsize=1)
def envoy_names() -> frozenset[str]:
    """Envoy's own identifiers (``envoy_names.txt``), whole names such as ``envoy.filters.http.router``."""
    text = resources.files("envoy_dissector.parser").joinpath("envoy_names.txt").read_text()
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def without_envoy_names(text: str) -> str:
    """``text`` with Envoy's own identifiers taken out: the listed items of a start-up extension listing (bare
    names such as ``tls`` only there), dotted names of ``envoy_names()`` anywhere. An unlisted name stays."""
    names = envoy_names()
    listing = _LISTING.fullmatch(text)
    if listing and listing[1] in names:
        return "main\t" + ", ".join(item for item in listing[2].split(", ") if item not in names)
    return _DOTTED.sub(lambda m: "" if m[0] in names else m[0], text)


def value_free(shape: str, rule: ShapeRule) -> bool:
    """Whether storing this rule writes nothing of the capture's values: every word of the shape, of the
    placeholders' signatures and of the pinned values is in ``vocabulary()`` (digits, quoted strings and
    hex are placeholders already), Envoy's own identifiers aside (``without_envoy_names``)."""
    words = vocabulary()
    texts = (shape, *rule.signatures, *rule.exact_values)
    return all(w in words for text in texts for w in _WORD.findall(without_envoy_names(text)))


def save(rules: dict[str, ShapeRule]) -> None:
    """Write the value-free rules (atomically; a failure to write is not an error: the cache is an
    optimisation). Files of other fingerprints (stale, possibly from versions that stored values) go."""
    if not enabled() or not rules or len(rules) > MAX_SHAPES:
        return
    rules = {shape: rule for shape, rule in rules.items() if value_free(shape, rule)}
    path = cache_path()
    _remove_stale(path)
    if not rules:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({"fingerprint": fingerprint(), "rules": {s: _encode(r) for s, r in rules.items()}})
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".shapes-", delete=False) as fh:
            fh.write(payload)
        os.replace(fh.name, path)
    except OSError:
        return


def _remove_stale(current: Path) -> None:
    try:
        for old in current.parent.glob("shapes-*.json"):
            if old != current:
                old.unlink()
    except OSError:
        return
