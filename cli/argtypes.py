"""Checked option values for argparse: a bad one is argparse's one-line usage error (exit 64), never a
traceback or a silently different value later (a port past 65535, a float that is ``nan``)."""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable

#: The largest count a listing option takes (``--top``); more rows than this belong in an export.
MAX_COUNT = 1_000_000


def port(text: str) -> int:
    """A TCP port to listen on: 1-65535 (0 would pick a random port while the banner names 0)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is out of range (1-65535)")
    return n


def count(text: str) -> int:
    """A whole number from 0 to :data:`MAX_COUNT`."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative; use 0 or more")
    if n > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text} is out of range (at most {MAX_COUNT:,})")
    return n


def positive_number(*, at_most: float) -> Callable[[str], float]:
    """A finite number above 0 and at most ``at_most`` (``nan``, ``inf``, ``1e400`` are refused)."""

    limit = f"{at_most:,.0f}" if at_most == int(at_most) else f"{at_most:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not 0 < value <= at_most:
            raise argparse.ArgumentTypeError(f"{text} is out of range (above 0, at most {limit})")
        return value

    return parse
