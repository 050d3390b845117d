"""JSON whose objects name each key once: parsers disagree on which of two values wins (Python's takes the
last, others the first), so a document that two readers could read differently is refused, never guessed at."""

from __future__ import annotations

from typing import Any


class DuplicateKey(ValueError):
    """A JSON object names one key twice; ``key`` is that key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads(..., object_pairs_hook=no_duplicate_keys)``: an object, or :class:`DuplicateKey`."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen
