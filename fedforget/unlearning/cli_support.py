"""What every ``fedforget`` command shares, its methods' own commands included: the console, the store and
JSON options, and opening a store checked before anything reads it."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console

from fedforget.store import Store, StoreError
from fedforget.store.check import check_store, corrupt_ledger
from fedforget.store.ledger import LedgerUsageError
from fedforget.unlearning.errors import BROKEN_STORE_EXIT, fail

console = Console()

StoreOpt = Annotated[str, typer.Option("--store", help="Store directory of a run (store= in the run config).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def from_cwd(path: str) -> str:
    """A relative ``--store`` is taken from the current directory, like any path a command is given (the
    run config's ``store=`` is resolved by the ServerApp against ``FEDFORGET_HOME`` instead)."""
    return os.path.abspath(os.path.expanduser(path)) if path else path


def open_store(path: str) -> Store:
    """Open a store and check it before any command reads it (``fedforget.store.check``): one line and
    exit 2 when the path is not a readable store, exit 1 when the store is not what it claims (tampered,
    corrupt, half-applied); nothing is written either way."""
    try:
        handle = Store.open(from_cwd(path))
    except StoreError as exc:
        fail(str(exc))
    check = check_store(handle)
    if check.unreadable:
        fail(check.summary())
    if check.refusals:
        fail(check.summary(), code=BROKEN_STORE_EXIT)
    return handle


def emit(data: dict, as_json: bool) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


@contextmanager
def store_errors(*also: type[Exception]) -> Iterator[None]:
    """A store command's errors as one-line exits: a store or ledger the user must fix (and ``also``) exits 2;
    a damaged page of the sample index, which is not checked up front, exits as a broken store."""
    try:
        yield
    except (StoreError, LedgerUsageError, *also) as exc:
        fail(str(exc))
    except sqlite3.DatabaseError as exc:
        fail(corrupt_ledger(exc), code=BROKEN_STORE_EXIT)
