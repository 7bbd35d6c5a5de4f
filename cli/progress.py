"""Progress bar on stderr for long inputs (silent when stderr is not a terminal or with --quiet)."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from envoy_dissector.parser.sources import Source

MIN_BYTES_FOR_BAR = 8 * 1024 * 1024


@contextmanager
def progress_for(sources: Sequence[Source], *, quiet: bool = False,
                 desc: str = "parsing") -> Iterator[Callable[[int], None]]:
    """Yields ``advance(bytes)``; shows a bar only for big inputs on a TTY."""
    sizes = [s.size() for s in sources]
    total = sum(s for s in sizes if s) if all(sizes) else None
    show = not quiet and sys.stderr.isatty() and (total is None or total >= MIN_BYTES_FOR_BAR)
    if not show:
        yield lambda n: None
        return
    from tqdm import tqdm  # (only where a bar is shown: its import is 15-20 ms of every run's start)

    gz = any(s.path is not None and s.path.suffix == ".gz" for s in sources)
    with tqdm(total=None if gz else total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
              desc=desc, leave=False) as bar:
        def advance(n: int) -> None:
            bar.update(n)

        yield advance
