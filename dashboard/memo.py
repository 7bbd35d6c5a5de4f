"""A small LRU of computed views, computed once however many requests ask for the same key at once.

A request's log lines are read again from the upload and parsed (half a second on a quiet machine); a
browser asks again whenever the button is pressed, and several tabs may ask at once. The value is kept
per (dataset id, ...) key and dropped with its dataset.

>>> memo = Memo(max_entries=2)
>>> memo.get(("d1", "u1"), lambda: "lines"), memo.get(("d1", "u1"), lambda: "again")
('lines', 'lines')
>>> memo.forget("d1"); memo.get(("d1", "u1"), lambda: "again")
'again'
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

Key = tuple[str, Hashable]


class Memo:
    """Thread-safe LRU; a key being computed makes other askers wait for it instead of computing again."""

    def __init__(self, max_entries: int = 16) -> None:
        self.max_entries = max_entries
        self._values: OrderedDict[Key, Any] = OrderedDict()
        self._computing: dict[Key, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, key: Key, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            flight = self._computing.setdefault(key, threading.Lock())
        with flight:
            with self._lock:
                if key in self._values:
                    return self._values[key]
            try:
                value = compute()
                with self._lock:
                    self._values[key] = value
                    while len(self._values) > self.max_entries:
                        self._values.popitem(last=False)
            finally:
                with self._lock:
                    self._computing.pop(key, None)
        return value

    def forget(self, dataset_id: str) -> None:
        """Drop every value of one dataset (it was evicted)."""
        with self._lock:
            for key in [k for k in self._values if k[0] == dataset_id]:
                del self._values[key]


__all__ = ["Memo"]
