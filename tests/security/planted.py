"""A capture with secrets planted in every place and spelling that must be redacted (docs/security.md).

Built from the real ``istio-thread/keepalive`` and ``istio-json/keepalive`` fixtures: every request's
header dumps get extra headers (names from the fixed list, names caught by pattern, values caught by
shape, non-canonical spacing), every ``:path`` and ``match for URL`` gets sensitive query parameters,
codec ``completed header`` lines get secret values (by name and by shape), and the capture starts with
header lines cut from their record (``kubectl logs --tail``) and an access-log line (quoted in diagnostics).
Query parameters come plain, percent-encoded and nested in another parameter's URL; a ``referer`` carries
an OAuth token in its fragment. Every secret contains ``MARK``: nothing with it may leave the tool.
"""
from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

MARK = "PLANT"
#: (name, value) added to every header dump; the name's spelling is kept as written
DUMP_HEADERS: tuple[tuple[str, str], ...] = (
    ("x-vault-token", "hvs.PLANTvault01"),
    ("x-goog-api-key", "AIzaPLANTgoog02"),
    ("private-token", "glpat-PLANTgitlab03"),
    ("ocp-apim-subscription-key", "PLANTapim04"),
    ("x-session-token", "PLANTsession05"),
    ("www-authenticate", 'Bearer realm="PLANTrealm06"'),
    ("x-forwarded-user-info", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.PLANTjwt07sig"),  # by shape: a JWT
    ("x-partner-hint", "Bearer PLANTbearer08"),  # by shape: an auth scheme
    ("x-tenant-hint", "Zx9PLANT0009aB3dE5fG7hJ1kL3mN5pQ7rS9tU"),  # by shape: a long mixed token
    ("Cookie", "sid=PLANTcookie10; theme=dark"),
    ("set-cookie", "id=PLANTsetcookie11; Max-Age=60"),
    ("X-Api-Key", "PLANTapikey12"),
    ("x-my-secret-thing", "PLANTsecret13"),
    ("x-db-password", "PLANTpassword14"),
    ("referer", "https://app.example/cb#access_token=PLANTfragment27&token_type=bearer"),  # a URL fragment
)
#: non-canonical spacing and case
ODD_SPACING = "'Authorization' , 'Basic PLANTbasic15'"
QUERY = ("?access_token=PLANTqs16&api_key=PLANTqs17&token=PLANTqs18&password=PLANTqs19&client_secret=PLANTqs20"
         "&access%5Ftoken=PLANTqs28&api%5Fkey=PLANTqs29&%70assword=PLANTqs30"  # percent-encoded names
         "&next=https%3A%2F%2Fapp%2Fcb%3Ftoken%3DPLANTqs31%26state%3Dx"  # a URL in a parameter
         "&back=%252Fcb%253Fapi_key%253DPLANTqs32&ok=1")  # encoded twice
CODEC = (("x-vault-token", "PLANTcodec21"), ("x-any-header", "Bearer PLANTcodec22"), ("authorization", "PLANTcodec23"),
         ("x-tenant-hint", "Zx9PLANT0033aB3dE5fG7hJ1kL3mN5pQ7rS9tU"))  # by shape: a long mixed token
#: an access-log line (Envoy writes them to the same stream): a malformed line quoted in diagnostics
ACCESS_LOG = ('{"x_api_key":"PLANTlog34","authorization":"Bearer PLANTlog35","user_token":"PLANTlog36",'
              '"path":"/a#id_token=PLANTlog37","code":200}')
#: header lines cut from their record by the capture's start
CUT = ("'authorization', 'Bearer PLANTcut24'", "'x-amz-security-token', 'PLANTcut25'",
       "  'x-vault-token' ,'PLANTcut26'")
SECRETS_PLANTED = len(DUMP_HEADERS) + 1 + QUERY.count(MARK) + len(CODEC) + len(CUT) + ACCESS_LOG.count(MARK)


def _plant_lines(lines: list[str]) -> list[str]:
    """Header dump lines and URLs of one message (or of a text capture) with the secrets added."""
    out = []
    for line in lines:
        m = re.match(r"^(':path', ')([^'?]*)(.*)'$", line)
        if m:
            out.append(f"{m.group(1)}{m.group(2)}{QUERY}'")
            continue
        line = re.sub(r"(match for URL ')([^'?]*)", lambda g: g.group(1) + g.group(2) + QUERY, line)
        out.append(line)
        if line.startswith("':method', "):
            out.extend(f"'{name}', '{value}'" for name, value in DUMP_HEADERS)
            out.append(ODD_SPACING)
    return out


def _codec_text(template: str) -> list[str]:
    """Codec header lines in the envelope of ``template`` (a completed-header line of the text capture)."""
    head, _, tail = template.partition("completed header: key=")
    suffix = tail[tail.index("\t"):] if "\t" in tail else ""
    return [f"{head}completed header: key={k} value={v}{suffix}" for k, v in CODEC]


def planted_text(fixtures: Path) -> str:
    with gzip.open(fixtures / "istio-thread/keepalive/envoy.log.gz", "rt") as fh:
        lines = fh.read().splitlines()
    out = [*CUT, ACCESS_LOG]
    codec_done = False
    for line in _plant_lines(lines):
        out.append(line)
        if not codec_done and "completed header: key=" in line:
            out.extend(_codec_text(line))
            codec_done = True
    return "\n".join(out) + "\n"


def planted_json(fixtures: Path) -> str:
    with gzip.open(fixtures / "istio-json/keepalive/envoy.log.gz", "rt") as fh:
        lines = fh.read().splitlines()
    out = [*CUT, ACCESS_LOG]
    codec_done = False
    for line in lines:
        record = json.loads(line)
        record["msg"] = "\n".join(_plant_lines(record["msg"].split("\n")))
        out.append(json.dumps(record, separators=(",", ":")))
        if not codec_done and "completed header: key=" in record["msg"]:
            for k, v in CODEC:
                codec = dict(record, msg=re.sub(r"completed header: key=.*", f"completed header: key={k} value={v}",
                                                record["msg"]))
                out.append(json.dumps(codec, separators=(",", ":")))
            codec_done = True
    return "\n".join(out) + "\n"


def kubectl_prefix(text: str, pod: str = "productpage-v1-7d9c8b6f5-x2k9p") -> str:
    return "".join(f"[pod/{pod}/istio-proxy] {line}\n" for line in text.splitlines())


def kubectl_timestamps(text: str) -> str:
    return "".join(f"2026-11-22T01:09:{34 + i // 100000:02d}.{i % 1000000:06d}000Z {line}\n"
                   for i, line in enumerate(text.splitlines()))


#: The planted capture in each layout a user may hand over (Istio text and JSON, with kubectl's prefix and
#: timestamps), each made from the fixtures directory.
VARIANTS: dict[str, Callable[[Path], str]] = {
    "istio-text": planted_text,
    "istio-json": planted_json,
    "text-kubectl-prefix": lambda f: kubectl_prefix(planted_text(f)),
    "text-kubectl-timestamps": lambda f: kubectl_timestamps(planted_text(f)),
    "json-kubectl-timestamps-prefix": lambda f: kubectl_prefix(kubectl_timestamps(planted_json(f))),
}
