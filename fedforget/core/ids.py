"""Ids a user types (sample, client, slice, request): the digits 0-9 only, within the ledger's integer range.

Python's ``int()`` also reads ``1_8`` as 18, ``+18`` and `` 18 `` as 18, and digits of other scripts (``١٨``
is 18). A forget cannot be undone, so an id is taken only as written in ASCII digits; anything else is
refused, never guessed at.
"""

from __future__ import annotations

#: SQLite's INTEGER is 64-bit signed: every id the ledger stores is below 2⁶³.
MAX_ID = 2**63 - 1
#: How much of a refused value a message quotes.
QUOTED_CHARS = 40


def parse_id(text: str, what: str = "id", minimum: int = 0) -> int:
    """``text`` as an id in ``minimum``..:data:`MAX_ID`; ValueError with one line saying what is wrong."""
    if not (text.isascii() and text.isdigit()):  # for ASCII text, isdigit() is exactly [0-9]+
        quoted = repr(text[:QUOTED_CHARS]) + ("…" if len(text) > QUOTED_CHARS else "")
        raise ValueError(f"{what} {quoted} is not a whole number written in the digits 0-9 (no sign, spaces, "
                         "underscores or other scripts' digits)")
    digits = text.lstrip("0") or "0"
    value = int(digits) if len(digits) <= len(str(MAX_ID)) else MAX_ID + 1
    if not minimum <= value <= MAX_ID:
        shown = digits if len(digits) <= QUOTED_CHARS else digits[:QUOTED_CHARS] + "…"
        raise ValueError(f"{what} {shown} is out of range: {what}s are {minimum}..{MAX_ID} (below 2⁶³)")
    return value
