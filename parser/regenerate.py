"""Regenerate the committed ANTLR code from ``EnvoyLog.g4`` (needs Java; ``pip install antlr4-tools``).

    python -m envoy_dissector.parser.regenerate [--check]

``--check`` regenerates into a temporary directory and exits non-zero when the
committed files differ (the sync test runs this).
"""
from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ANTLR_VERSION = "4.13.2"
HERE = Path(__file__).resolve().parent
GRAMMAR = HERE / "EnvoyLog.g4"
GENERATED = HERE / "generated"
OUTPUTS = ("EnvoyLogLexer.py", "EnvoyLogParser.py", "EnvoyLogVisitor.py", "EnvoyLog.interp", "EnvoyLog.tokens",
           "EnvoyLogLexer.interp", "EnvoyLogLexer.tokens")


def generate(out_dir: Path) -> None:
    tool = shutil.which("antlr4")
    if tool is None:
        raise SystemExit("antlr4 not found: pip install antlr4-tools (needs Java)")
    out_dir.mkdir(parents=True, exist_ok=True)
    # Run from the grammar's folder so the generated headers name only "EnvoyLog.g4", not a machine path.
    subprocess.run([tool, "-v", ANTLR_VERSION, "-Dlanguage=Python3", "-no-listener", "-visitor",
                    "-o", str(out_dir), "-Xexact-output-dir", GRAMMAR.name], check=True, cwd=HERE)


def differences(out_dir: Path) -> list[str]:
    return [name for name in OUTPUTS
            if not (GENERATED / name).exists() or not filecmp.cmp(out_dir / name, GENERATED / name, shallow=False)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report whether the committed code is in sync")
    args = ap.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            diff = differences(Path(tmp))
        if diff:
            print("out of sync with EnvoyLog.g4: " + ", ".join(diff), file=sys.stderr)
            return 1
        print("generated parser is in sync with EnvoyLog.g4")
        return 0
    generate(GENERATED)
    print(f"regenerated {GENERATED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
