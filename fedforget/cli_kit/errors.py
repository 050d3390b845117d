"""How the CLI fails: one line on stderr, exit code 2 for anything the user must fix, 1 for a store that is
not what it claims (tampered, corrupt, half applied: nothing the user typed is wrong)."""

from __future__ import annotations

import sys
from typing import NoReturn

USAGE_EXIT = 2
BROKEN_STORE_EXIT = 1


class UsageError(Exception):
    """Bad input: the message is the one line the user sees."""


def one_line(message: str) -> str:
    """Escape newlines and other unprintable characters (a path may hold any), so it stays one line."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in message)


def fail(message: str, code: int = USAGE_EXIT) -> NoReturn:
    print(f"fedforget: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(code)
