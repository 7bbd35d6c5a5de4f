"""When a job poll redraws a running analysis' provisional overview (dashboard/callbacks.py): the first requests to
finish at the next poll, later ones every ``PROVISIONAL_EVERY`` polls, nothing when no request finished since."""
from __future__ import annotations

import pytest

from envoy_dissector.dashboard.callbacks import PROVISIONAL_EVERY, redraw_provisional


@pytest.mark.parametrize("shown", [None, 0])
def test_the_first_requests_are_drawn_at_the_next_poll_whatever_its_number(shown: int | None) -> None:
    assert all(redraw_provisional(5_081, shown, polls) for polls in range(1, 2 * PROVISIONAL_EVERY + 1))
    assert not any(redraw_provisional(0, 0, polls) for polls in range(1, 2 * PROVISIONAL_EVERY + 1))


def test_later_requests_are_drawn_every_few_polls_and_only_when_more_finished() -> None:
    drawn = [polls for polls in range(1, 3 * PROVISIONAL_EVERY + 1) if redraw_provisional(8_000, 5_081, polls)]
    assert drawn == [PROVISIONAL_EVERY, 2 * PROVISIONAL_EVERY, 3 * PROVISIONAL_EVERY]
    assert not any(redraw_provisional(5_081, 5_081, polls) for polls in range(1, 3 * PROVISIONAL_EVERY + 1))
