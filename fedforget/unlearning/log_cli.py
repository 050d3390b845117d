"""``fedforget log``: export the ledger's log, verify a log and receipts with the public key alone, sign a head."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from fedforget.cli_kit.errors import BROKEN_STORE_EXIT, fail
from fedforget.cli_kit.support import JsonOpt, StoreOpt, console, emit, from_cwd, open_store, read_only_errors

log_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="The ledger's log: export it, verify it (and receipts) with the public key, sign a head.")


@log_app.command()
def export(
    store: StoreOpt,
    out: Annotated[str, typer.Option("--out", help="The file to write the log to (JSON lines, owner-only).")],
    as_json: JsonOpt = False,
) -> None:
    """Write the store's log (entries and signed heads) to OUT, for `fedforget log verify` anywhere."""
    from fedforget.store.atomic import atomic_write_bytes
    from fedforget.unlearning.log_verify import export_bytes, store_log

    target = Path(from_cwd(out))
    if not target.parent.is_dir():
        fail(f"{target.parent} is not a directory; make it first or pick another --out")
    if target.is_dir():
        fail(f"{target} is a directory; name a file with --out")
    handle = open_store(store)
    ledger = handle.ledger()
    try:
        with ledger.snapshot() as db:
            log = store_log(db)
    finally:
        ledger.close()
    try:
        atomic_write_bytes(target, export_bytes(log))
    except OSError as exc:
        fail(f"cannot write {target}: {exc.strerror or exc}")
    summary = {"out": str(target), "log": log.entries[0][2] if log.entries else None, "entries": len(log.entries),
               "heads": len(log.heads)}
    if as_json:
        emit(summary, True)
    else:
        console.print(escape(f"wrote {summary['entries']} entries and {summary['heads']} signed head(s) to {target}"),
                      soft_wrap=True, highlight=False)


def _receipts(paths: list[str], keys: list[bytes]) -> list[tuple[str, dict[str, Any], bytes]]:
    """Each receipt's checked body and the key that signed it: unreadable or not JSON exits 2, a signature by
    none of ``keys`` exits 1."""
    import base64

    from fedforget.unlearning.receipt import ReceiptError, check_receipt, parse_receipt, read_receipt_file

    out = []
    for name in paths:
        try:
            data = read_receipt_file(Path(from_cwd(name)))
        except OSError as exc:
            fail(f"cannot read {name!r} as a receipt: {exc.strerror or exc}")
        try:
            claimed = base64.b64decode(str(parse_receipt(data)["signature"]["public_key"]), validate=True)
        except (ValueError, TypeError, KeyError):
            claimed = b""
        key = claimed if claimed in keys else keys[0]
        try:
            out.append((name, check_receipt(data, key), key))
        except ReceiptError as exc:
            fail(f"receipt {name} NOT valid: {exc}", code=BROKEN_STORE_EXIT)
        except ValueError as exc:
            fail(f"cannot read {name!r} as a receipt: it is not JSON ({exc.__class__.__name__})")
    return out


@log_app.command()
def verify(
    log: Annotated[str, typer.Option("--log", help="A log export (`fedforget log export`).")] = "",
    store: Annotated[str, typer.Option("--store", help="Read the log of this store instead of --log.")] = "",
    public_key: Annotated[list[str] | None, typer.Option(
        "--public-key", help="The coordinator's PEM public key (default: its key on this machine); repeat it "
        "for a log signed before and after `receipt --new-key`.")] = None,
    receipt: Annotated[list[str] | None, typer.Option("--receipt", help="A receipt to prove against the log "
                                                      "(repeat).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a log with the public key alone: entries chained, what each entry written without the key changes,
    every head's root and signature, and each receipt's signature, inclusion proof and head against the log (exit
    1 with one line when a proof fails). With --store, the store's tables, files and receipts are checked against
    its log too (the check every command runs); with --log, the log alone."""
    from fedforget.unlearning.log_verify import LogInputError, LogProofError, read_export, read_store, verify_log
    from fedforget.unlearning.receipt import ReceiptKeyError, load_public_key

    if bool(log) == bool(store):
        fail("name one log: --log FILE (an export) or --store S")
    keys = []
    for path in public_key or [None]:
        try:
            keys.append(load_public_key(Path(from_cwd(path)) if path else None))
        except ReceiptKeyError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot read the key {path}: {exc.strerror or exc}")
    bodies = _receipts(receipt or [], keys)
    try:
        copy = read_export(Path(from_cwd(log))) if log else read_store(Path(from_cwd(store)))
        checked = verify_log(copy, frozenset(keys), bodies)
    except LogInputError as exc:
        fail(str(exc))
    except LogProofError as exc:
        fail(f"log NOT valid: {exc}", code=BROKEN_STORE_EXIT)
    except OSError as exc:
        fail(f"cannot read {log!r} as a log export: {exc.strerror or exc}")
    if store:
        _check_store_against_log(Path(from_cwd(store)))
    checked_what = STORE_CHECKED if store else LOG_ALONE
    if as_json:
        emit({**checked.to_json(), "checked": "log and store" if store else "log"}, True)
        return
    unsigned = checked.entries - checked.signed
    console.print("[bold green]valid[/]: " + escape(
        f"log {str(checked.log)[:16]}…: {checked.entries} entries chained, {checked.heads} signed head(s) hold"
        + (f"; {unsigned} newest entries under no head yet" if unsigned else "") + f"; {checked_what}"),
        soft_wrap=True, highlight=False)
    for r in checked.receipts:
        where = (f"its forget entry #{r['entry']} is in the log" if r["entry"] is not None else
                 "its request predates the log")
        console.print(escape(f" receipt {r['receipt']} (request #{r['request']}): {where}; its head of "
                             f"{r['head_size']} entries is this log's"), soft_wrap=True, highlight=False)


#: What ``log verify`` says it checked.
LOG_ALONE = "checked the log alone, not any store's tables (--store S checks a store against its log)"
STORE_CHECKED = "the store's tables, files and receipts agree with it"


def _check_store_against_log(root: Path) -> None:
    """The store check every command runs, read-only (nothing is adopted or written): exit 1 in one line when the
    store is not what its log says."""
    from fedforget.store import Store, StoreError
    from fedforget.store.check import check_store

    try:
        result = check_store(Store.open(root))
    except StoreError as exc:
        fail(str(exc))
    if result.unreadable:
        fail(result.summary())
    if not result.ok:
        fail(result.summary(), code=BROKEN_STORE_EXIT)


@log_app.command()
def sign(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Sign a head now over every entry so far (a training run's entries wait for the coordinator's next write)."""
    from fedforget.store.log import latest_head

    handle = open_store(store, writes="log sign")
    ledger = handle.ledger()
    try:
        with read_only_errors(handle, "log sign"):
            with ledger.transaction("sign"):
                pass
        head = latest_head(ledger.db)
    finally:
        ledger.close()
    if head is None:
        fail("no head was signed: this process holds no coordinator key", code=BROKEN_STORE_EXIT)
    if as_json:
        emit({"size": head["size"], "root": head["root"], "log": head["log"]}, True)
    else:
        console.print(f"signed the log head of {head['size']} entries (root {head['root'][:16]}…)", highlight=False)
