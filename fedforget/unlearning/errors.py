"""How the CLI fails: one line on stderr, exit code 2 for anything the user must fix."""

from __future__ import annotations

import sys
from typing import NoReturn

USAGE_EXIT = 2


class UsageError(Exception):
    """Bad input: the message is the one line the user sees."""


def one_line(message: str) -> str:
    """Escape newlines and other unprintable characters (a path may hold any), so it stays one line."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in message)


def fail(message: str, code: int = USAGE_EXIT) -> NoReturn:
    print(f"fedforget: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(code)
