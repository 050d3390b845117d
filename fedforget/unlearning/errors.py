"""How the CLI fails: one line on stderr, exit code 2 for anything the user must fix."""

from __future__ import annotations

import sys
from typing import NoReturn

USAGE_EXIT = 2


class UsageError(Exception):
    """Bad input: the message is the one line the user sees."""


def fail(message: str, code: int = USAGE_EXIT) -> NoReturn:
    print(f"fedforget: error: {message}", file=sys.stderr)
    raise SystemExit(code)
