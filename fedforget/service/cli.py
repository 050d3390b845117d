"""``fedforget serve`` and ``fedforget token``: the service's commands, which the CLI adds when it is built.

Importing this module imports none of the service: each command imports what it runs when it runs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from fedforget.cli_kit.errors import fail
from fedforget.cli_kit.support import JsonOpt, StoreOpt, console, emit, from_cwd, open_store, pem_file_option

token_app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                        help="Bearer tokens of `fedforget serve` (kept hashed in the secrets directory).")


def add_commands(app: typer.Typer) -> None:
    """``fedforget serve``, ``fedforget deadlines`` and the ``fedforget token`` group."""
    app.command()(serve)
    app.command()(deadlines)
    app.add_typer(token_app, name="token")


def serve(
    store: StoreOpt,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8080,
    tls_cert: Annotated[str, typer.Option("--tls-cert", help="PEM certificate (with --tls-key): serve HTTPS.",
                                          callback=pem_file_option)] = "",
    tls_key: Annotated[str, typer.Option("--tls-key", help="PEM private key of --tls-cert.",
                                         callback=pem_file_option)] = "",
) -> None:
    """The forget service: HTTP API, console and metrics for one store (docs: operations/service.md)."""
    from pathlib import Path

    from fedforget.cli_kit.errors import BROKEN_STORE_EXIT
    from fedforget.service.server import ServeError
    from fedforget.service.server import serve as run_service
    from fedforget.service.service import StoreRefused

    if bool(tls_cert) != bool(tls_key):
        fail("pass --tls-cert and --tls-key together (or neither)")
    for path in (tls_cert, tls_key):
        if path and not Path(from_cwd(path)).is_file():
            fail(f"{path} is not a file")
    handle = open_store(store, writes="serve")
    try:
        run_service(handle.root, host, port, Path(from_cwd(tls_cert)) if tls_cert else None,
                    Path(from_cwd(tls_key)) if tls_key else None)
    except ServeError as exc:
        fail(str(exc))
    except StoreRefused as exc:
        fail(str(exc), BROKEN_STORE_EXIT)


def deadlines(
    store: StoreOpt,
    policy: Annotated[str | None, typer.Option("--policy", help="The legal clock: gdpr (one calendar month, the "
                                               "default) or ccpa (45 days).")] = None,
    complete_at: Annotated[str | None, typer.Option("--complete-at", help="The state that completes a request: "
                                                    "purged (the default), acknowledged or retrained.")] = None,
    nearing_days: Annotated[float | None, typer.Option("--nearing-days", help="A request due within this many "
                                                       "days counts as nearing its deadline (default 7).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The forget requests' legal clock: show the settings in force, or set them (kept in service.db, for status,
    the service and OpenDSR alike; docs: operations/service.md)."""
    from dataclasses import replace

    from fedforget.service.deadline_writer import write_settings
    from fedforget.unlearning.deadline_settings import (
        DeadlineSettingError,
        DeadlineSettings,
        read_settings,
        settings_history,
    )
    from fedforget.unlearning.legal_clock import POLICIES

    changes = {k: v for k, v in (("policy", policy), ("completion_point", complete_at),
                                 ("nearing_days", nearing_days)) if v is not None}
    try:  # bad input is refused before the store is opened: nothing is written
        DeadlineSettings(**changes).checked()
    except DeadlineSettingError as exc:
        fail(str(exc))
    handle = open_store(store, writes="deadlines" if changes else None)
    settings = read_settings(handle.root)
    if changes:
        settings = write_settings(handle.root, replace(settings, **changes))
    if as_json:
        emit({**settings.to_json(), "policy_period": POLICIES[settings.policy],
              "history": settings_history(handle.root)}, True)
        return
    console.print(f"{'set: ' if changes else ''}policy {settings.policy} ({POLICIES[settings.policy]}) · complete "
                  f"once {settings.completion_point} · nearing within {settings.nearing_days:g} days",
                  highlight=False, soft_wrap=True)


@token_app.command("create")
def token_create(
    store: StoreOpt,
    name: Annotated[str, typer.Option("--name", help="Who holds it (recorded as who asked).")],
    scope: Annotated[list[str], typer.Option("--scope", help="forget:write, status:read or predict (repeat).")],
    as_json: JsonOpt = False,
) -> None:
    """Create a token and print it once (only its sha256 is kept)."""
    from fedforget.service.tokens import TokenError, create_token

    handle = open_store(store)
    try:
        token, record = create_token(handle.root, name, scope)
    except TokenError as exc:
        fail(str(exc))
    if as_json:
        emit({"token": token, **record.to_json()}, True)
    else:
        print(token)
        Console(stderr=True).print(f"token {record.name!r} with scope(s) {', '.join(record.scopes)}: shown once, "
                                   "keep it now", highlight=False)


@token_app.command("list")
def token_list(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """The store's tokens: name, scopes, created, revoked (never the tokens themselves)."""
    from fedforget.service.tokens import TokenError, list_tokens

    handle = open_store(store)
    try:
        tokens = list_tokens(handle.root)
    except TokenError as exc:
        fail(str(exc))
    if as_json:
        emit({"tokens": [t.to_json() for t in tokens]}, True)
        return
    for t in tokens:
        console.print(f"{t.name}: {', '.join(t.scopes)}" + (" [red]revoked[/]" if t.revoked_at else ""),
                      highlight=False)
    if not tokens:
        console.print("no tokens (`fedforget token create --store DIR --scope SCOPE --name NAME`)")


@token_app.command("revoke")
def token_revoke(store: StoreOpt, name: Annotated[str, typer.Option("--name", help="The token to revoke.")]) -> None:
    """Revoke a token: the service refuses it from its next request on."""
    from fedforget.service.tokens import TokenError, revoke_token

    handle = open_store(store)
    try:
        revoke_token(handle.root, name)
    except TokenError as exc:
        fail(str(exc))
    console.print(f"revoked {name!r}", highlight=False)
