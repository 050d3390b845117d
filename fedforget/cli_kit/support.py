"""What every ``fedforget`` command shares, its methods' own commands included: the console, the store and
JSON options, ids as typed (:class:`IdParam`), files named on the command line, and opening a store checked
before anything reads it (and, for a command that writes, checked writable before anything is written)."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import click
import typer
from rich.console import Console

from fedforget.cli_kit.errors import BROKEN_STORE_EXIT, fail
from fedforget.core.ids import parse_id
from fedforget.store import Store, StoreError
from fedforget.store.bounded_read import open_regular
from fedforget.store.check import check_store, corrupt_ledger
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.read_only import is_read_only_error, read_only_message, unwritable_path

console = Console()

StoreOpt = Annotated[str, typer.Option("--store", help="Store directory of a run (store= in the run config).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
#: A PEM certificate or key is a few kilobytes; a path to anything larger is not one.
MAX_PEM_BYTES = 1 * 2**20


class IdParam(click.ParamType):
    """An id typed on the command line (sample, client, slice, request): the digits 0-9 only, below 2⁶³
    (:func:`fedforget.core.ids.parse_id`); anything else is a usage error (exit 2, one line)."""

    name = "integer"

    def __init__(self, what: str, minimum: int = 0) -> None:
        self.what, self.minimum = what, minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # a default declared in code
        try:
            return parse_id(str(value), self.what, self.minimum)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SAMPLE_ID = IdParam("sample id")
CLIENT_ID = IdParam("client id")
SLICE_INDEX = IdParam("slice")
REQUEST_ID = IdParam("request id", minimum=1)


def pem_file_option(value: str) -> str:
    """A typer callback: a PEM path given on the command line must be a regular file of at most
    :data:`MAX_PEM_BYTES` (a fifo, a device, a directory or a huge file is refused before anything reads it)."""
    if value:
        try:
            fd, _ = open_regular(from_cwd(value), MAX_PEM_BYTES, "PEM file")
        except OSError as exc:
            raise typer.BadParameter(f"{value}: {exc.strerror or exc}") from None
        os.close(fd)
    return value


def from_cwd(path: str) -> str:
    """A relative ``--store`` is taken from the current directory, like any path a command is given (the
    run config's ``store=`` is resolved by the ServerApp against ``FEDFORGET_HOME`` instead)."""
    return os.path.abspath(os.path.expanduser(path)) if path else path


def open_store(path: str, writes: str | None = None) -> Store:
    """Open a store and check it before any command reads it (``fedforget.store.check``): one line and
    exit 2 when the path is not a readable store, exit 1 when the store is not what it claims (tampered,
    corrupt, half-applied); nothing is written either way. ``writes`` names a command that must write to
    the store: a store it cannot write (read-only mount, no permission) exits 2 with one line first."""
    try:
        handle = Store.open(from_cwd(path))
    except StoreError as exc:
        fail(str(exc))
    check = check_store(handle)
    if check.unreadable:
        fail(check.summary())
    if check.refusals:
        fail(check.summary(), code=BROKEN_STORE_EXIT)
    from fedforget.tasks.user_task import use_app_of

    use_app_of(handle.manifest())  # a store of a user's app: its task module imports from that app's directory
    blocked = unwritable_path(handle.root)
    if writes is not None and blocked is not None:
        fail(read_only_message(handle.root, writes, f"{blocked} is not writable"))
    if blocked is None:
        from fedforget.store.log_adopt import ADOPTED, adopt_log

        if adopt_log(handle):
            print(f"fedforget: {ADOPTED}", file=sys.stderr)
    return handle


@contextmanager
def read_only_errors(handle: Store, command: str) -> Iterator[None]:
    """A write the OS or SQLite refused because the store cannot be written, as one line (exit 2)."""
    try:
        yield
    except (sqlite3.OperationalError, OSError) as exc:
        if not is_read_only_error(exc):
            raise
        fail(read_only_message(handle.root, command, _cause(exc), before=False))


def _cause(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return f"SQLite: {exc}"


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
    except sqlite3.OperationalError as exc:
        if is_read_only_error(exc):
            fail(f"the store cannot be written (SQLite: {exc}): it is read-only (a read-only mount or no write "
                 "permission); remount it read-write or give this user write permission")
        fail(corrupt_ledger(exc), code=BROKEN_STORE_EXIT)
    except sqlite3.DatabaseError as exc:
        fail(corrupt_ledger(exc), code=BROKEN_STORE_EXIT)
