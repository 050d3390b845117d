"""The ``fedforget`` command line (typer + rich)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from fedforget.cli_kit.errors import BROKEN_STORE_EXIT, fail
from fedforget.cli_kit.support import (
    CLIENT_ID,
    REQUEST_ID,
    SAMPLE_ID,
    SLICE_INDEX,
    JsonOpt,
    StoreOpt,
    console,
    emit,
    from_cwd,
    open_store,
    read_only_errors,
    store_errors,
)
from fedforget.service.cli import add_commands as add_service_commands
from fedforget.store import Store, StoreError
from fedforget.store.ledger import LedgerUsageError
from fedforget.store.store import resolve_store_path
from fedforget.unlearning.flwr_runner import flwr_run
from fedforget.unlearning.scrub import Scrub, scrub_complete
from fedforget.unlearning.status import accuracy_line, print_status, store_status

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Federated fine-tuning that can forget: train, forget, serve, retrain, verify.")


@app.callback()
def coordinator() -> None:
    """Every command, a method's or the service's included, is the coordinator: its ledger writes are signed
    with the receipt key (:mod:`fedforget.unlearning.log_signer`), set before it opens a store."""
    from fedforget.unlearning.log_signer import act_as_coordinator

    act_as_coordinator()

FederationOpt = Annotated[str, typer.Option(help="SuperLink connection in $FLWR_HOME/config.toml.",
                                            envvar="FEDFORGET_FEDERATION")]
RunConfigOpt = Annotated[str, typer.Option("--run-config", help="Flower run config, e.g. \"task='digits-mlp'\".")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show the from-scratch reference run's log.")]
ReferenceFederationOpt = Annotated[str, typer.Option(
    "--federation", help="Train the from-scratch reference through this SuperLink connection (the deployed nodes, "
    "which hold their own records) instead of in process.")]


def reference_run(work, verbose: bool, what: str = "retraining from scratch as the reference"):  # noqa: ANN001, ANN201
    """``work()`` (a from-scratch training in process) under a one-line progress; its Flower log only
    with ``verbose``."""
    from fedforget.unlearning.quiet import quiet_flwr_log

    if verbose:
        return work()
    with console.status(f"{what}…") as line:
        def progress(done: int, total: int, unit: str) -> None:
            line.update(f"{what}: {done}/{total} {unit}")

        with quiet_flwr_log(progress):
            return work()


def run_console(as_json: bool) -> Console:
    """Where a command that submits a Flower run prints its progress: stderr when stdout is JSON."""
    return Console(stderr=True) if as_json else console


def refuse_if_busy(handle: Store) -> None:
    """Exit 2 with one line if a live run holds the store's run lock (nothing is changed)."""
    from fedforget.store.lock import check_not_busy

    try:
        check_not_busy(handle.root)
    except StoreError as exc:
        fail(f"{exc}; nothing was changed")


@app.command()
def status(
    store: StoreOpt,
    artifacts: Annotated[bool, typer.Option("--artifacts", help="List every artifact with validity and sha256.")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """Serving plan, sequences and active prefixes, δ left, requests; --artifacts lists artifacts and sha256s."""
    handle = open_store(store)
    with store_errors():
        info = store_status(handle)
    if as_json:
        emit(info, True)
    else:
        print_status(info, console, show_artifacts=artifacts)


RecordOpt = Annotated[list[str] | None, typer.Option(
    "--record", help="A record as its owner knows it, NODE:RECORD_ID (split at the first colon).")]


@contextmanager
def record_errors() -> Iterator[None]:
    """A record the store does not hold exits 2 (:func:`store_errors`); a manifest whose ``nodes`` or plan is
    not what training writes exits as a broken store."""
    from fedforget.store.forget_plan import PlanError

    try:
        with store_errors():
            yield
    except PlanError as exc:
        fail(f"the store's manifest is not what a training run writes: {exc}", code=BROKEN_STORE_EXIT)


@app.command()
def samples(
    store: StoreOpt,
    client: Annotated[int | None, typer.Option("--client", help="The client (partition id) whose samples to list.",
                                               click_type=CLIENT_ID)] = None,
    node: Annotated[str | None, typer.Option("--node", help="The node (by name) whose samples to list.")] = None,
    slice_: Annotated[int | None, typer.Option("--slice", help="Only this slice of the client (its index).",
                                               click_type=SLICE_INDEX)] = None,
    as_json: JsonOpt = False,
) -> None:
    """A client's (--client) or node's (--node) sample ids by slice (unit PARTITION:SLICE), and which are
    forgotten: what `forget` can name."""
    from fedforget.core.record_ids import PUBLIC_RECORDS
    from fedforget.unlearning.samples import client_samples, node_samples

    if (client is None) == (node is None):
        fail("name one client (--client N) or one node (--node NAME)")
    handle = open_store(store)
    with record_errors():
        data = client_samples(handle, client, slice_) if node is None else node_samples(handle, node, slice_)
    if as_json:
        emit(data, True)
        return
    client, name = data["client"], data["node"]
    for s in data["slices"]:
        gone = set(s["forgotten"])
        ids = " ".join(f"[strike dim]{i}[/]" if i in gone else str(i) for i in s["samples"])
        console.print(f"{escape(f'node {name} (client {client})')} slice {s['slice']} (unit [cyan]{s['unit']}[/]): "
                      f"{len(s['samples'])} sample(s)" + (f", {len(gone)} forgotten" if gone else "") + f": {ids}",
                      soft_wrap=True)
    if data["records"] == PUBLIC_RECORDS:
        record = f"--record {name}:ID (its record ids are these sample ids)"
    else:
        record = f"--record {name}:RECORD_ID (its record ids are known only to the node)"
    console.print(escape(f"forget one with `fedforget forget --store {store} {record}` or --sample ID, a slice "
                         f"with --slice {client}:S, the client with --client {client}"), style="dim", soft_wrap=True)


@app.command()
def locate(
    store: StoreOpt,
    sample: Annotated[int | None, typer.Option("--sample", help="Sample id (the ledger's id of a record).",
                                               click_type=SAMPLE_ID)] = None,
    record: Annotated[str | None, typer.Option(
        "--record", help="A record as its owner knows it, NODE:RECORD_ID.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Which node, client, slice and unit hold a sample or a record, and whether it is forgotten."""
    from fedforget.unlearning.samples import locate_record, locate_sample

    if (sample is None) == (record is None):
        fail("name one sample (--sample ID) or one record (--record NODE:RECORD_ID)")
    handle = open_store(store)
    with record_errors():
        data = locate_sample(handle, sample) if record is None else locate_record(handle, record)
    if as_json:
        emit(data, True)
        return
    state = f"forgotten by request #{data['request']}" if data["forgotten"] else "held"
    if data["record"] is None:
        what = f"sample {data['sample']} (its record id is known only to node {data['node']})"
    elif record is None:
        what = f"sample {data['sample']} (record {data['record']})"
    else:
        what = f"record {data['record']} (sample {data['sample']})"
    console.print(escape(f"{what}: node {data['node']}, client {data['client']}, slice {data['slice']} (unit ")
                  + f"[cyan]{data['unit']}[/]) · {state}", soft_wrap=True, highlight=False)


@app.command()
def forget(
    store: StoreOpt,
    sample: Annotated[list[int] | None, typer.Option("--sample", help="Sample id (index in the train split).",
                                                     click_type=SAMPLE_ID)] = None,
    slice_: Annotated[list[str] | None, typer.Option("--slice", help="A client's slice, PARTITION:SLICE.")] = None,
    client: Annotated[list[int] | None, typer.Option("--client", help="A whole client (partition id).",
                                                     click_type=CLIENT_ID)] = None,
    record: RecordOpt = None,
    propagate: Annotated[bool, typer.Option(
        "--propagate", help="Reach the owning clients through Flower now: they delete the samples and "
        "acknowledge (`status` shows who did); an offline client is reached by the next retrain. Alone (nothing "
        "named), it propagates the requests already recorded.")] = False,
    federation: FederationOpt = "local-simulation",
    audit_before: Annotated[bool, typer.Option(
        "--audit-before", help="Measure the membership-inference audit on the model served before this request, "
        "before it is purged (needs torch; `fedforget audit` shows it as 'before').")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Forget samples, records (NODE:RECORD_ID), slices or clients now: invalidate and purge what saw them,
    re-plan serving (no training)."""
    from fedforget.unlearning.forget import forget_request

    handle = open_store(store, writes="forget")
    if propagate:
        refuse_if_busy(handle)  # before the request is applied: a refused propagation changes nothing
    named = bool(sample or slice_ or client or record)
    result = None
    if named or not propagate:
        try:
            with read_only_errors(handle, "forget"):
                with record_errors():
                    result = forget_request(handle, sample or [], slice_ or [], client or [],
                                            audit_before=audit_before, records=record or [])
        except (LedgerUsageError, StoreError) as exc:
            fail(str(exc))
    data = result.to_json() if result is not None else {}
    if propagate:
        data["propagation"], scrubbed = propagated(handle, federation, as_json, applied=result is not None)
        data["scrubbed"] = scrubbed.requests
    if as_json:
        emit(data, True)
        return
    if propagate:
        acks = data["propagation"]["acknowledgements"]
        mine = acks.get(str(result.request), {}) if result is not None and result.request is not None else None
        if mine is not None:
            console.print(f"propagated: partition(s) {mine.get('acknowledged', [])} deleted the samples and "
                          "acknowledged" + (f"; pending {mine['pending']} (reached by the next retrain)"
                                            if mine.get("pending") else ""))
        else:
            pending = {r: a["pending"] for r, a in acks.items() if a.get("pending")}
            console.print("propagated: every request reached the nodes that hold its samples" if not pending else
                          "propagated; still pending (reached by the next retrain): " + ", ".join(
                              f"#{r} (partition(s) {', '.join(map(str, p))})" for r, p in pending.items()))
        if scrubbed.requests:
            console.print(escape(scrubbed.line(handle)), soft_wrap=True, highlight=False)
    if result is None:
        return
    if result.request is None:
        console.print("already forgotten: no request recorded" if propagate else
                      "already forgotten: nothing changed (no request recorded)")
        return
    serving = result.serving
    if result.records:
        console.print(escape("records: " + ", ".join(f"{r} (sample {i})" for r, i in sorted(result.records.items()))),
                      soft_wrap=True, highlight=False)
    console.print(f"request [bold]#{result.request}[/]: forgot {result.new_samples} sample(s) in unit(s) "
                  f"{', '.join(result.units)}; invalidated {len(result.invalidated)} artifact(s) "
                  f"in {result.latency_ms:.1f} ms; purged {len(result.purged.get('files', []))} file(s)")
    if serving.get("available"):
        left = serving.get("deletions-left")
        console.print(f"serving {len(serving['artifacts'])} artifact(s) · expected deletions left "
                      f"{'—' if left is None else f'{left:.2f}'}" + ("" if propagate else " · clients drop the data at "
                      "the next `fedforget retrain` (or now with --propagate)"))
    else:
        console.print("[bold red]retrain required[/]: no valid model is left to serve; run `fedforget retrain`")


def propagated(handle: Store, federation: str, as_json: bool, applied: bool) -> tuple[dict, Scrub]:
    """``forget --propagate``'s run through ``federation``, then the scrub of the requests it completed: the
    ``propagation`` report (exit code, log, every request's acknowledgements) and what was scrubbed. A failed
    run exits 1 (``applied``: the request named was applied and purged before it)."""
    from fedforget.store.acks import request_acks
    from fedforget.unlearning.retrain import propagate_store

    before = "the request is applied and purged, but " if applied else ""
    try:
        code, log_path = propagate_store(handle, federation, run_console(as_json))
    except StoreError as exc:  # a run took the lock since the check above
        fail(f"{before}the propagation run was not started: {exc}; the next `fedforget retrain` reaches the clients",
             code=1)
    if code != 0:
        fail(f"{before}the propagation run failed (flwr exit code {code}); its log is {log_path}; the next "
             "`fedforget retrain` reaches the clients", code=1)
    scrubbed = scrub_complete(handle)
    ledger = handle.ledger()
    try:
        acks = request_acks(ledger)
    finally:
        ledger.close()
    return {"flwr_exit_code": code, "log": str(log_path),
            "acknowledgements": {str(r): a for r, a in acks.items()}}, scrubbed


@app.command()
def evaluate(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Test accuracy of exactly what is served now."""
    from fedforget.federation.serve import ServingError
    from fedforget.tasks.server_data import ServerTestError
    from fedforget.unlearning.evaluate import evaluate_store

    handle = open_store(store)
    with store_errors(ServerTestError):
        try:
            result = evaluate_store(handle)
        except ServingError as exc:
            fail(str(exc), code=1)
    if as_json:
        emit(result, True)
    else:
        from fedforget.tasks.task_functions import metric_names

        own = "".join(f", {k} {result[k]:.4f}" for k in metric_names(handle.manifest()) if k in result)
        console.print(f"served accuracy [bold]{result['accuracy']:.4f}[/] (loss {result['loss']:.4f}{own}, "
                      f"{result['num-examples']} test examples, {len(result['serving'])} artifact(s))")


@app.command()
def retrain(store: StoreOpt, federation: FederationOpt = "local-simulation", as_json: JsonOpt = False) -> None:
    """A Flower run: clients delete forgotten samples for good, then only invalid artifacts are rebuilt."""
    from fedforget.unlearning.flwr_runner import refusal_in_log
    from fedforget.unlearning.retrain import retrain_store

    handle = open_store(store, writes="retrain")
    refuse_if_busy(handle)  # fail fast; the ServerApp takes the lock itself
    try:
        code, log_path, target = retrain_store(handle, federation, run_console(as_json))
        info = store_status(handle, accuracy=False)
        ledger = handle.ledger()
        try:
            reached = ledger.retrained_watermark()
        finally:
            ledger.close()
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if code != 0 or reached < target:
        refuse_if_busy(handle)  # another run took the lock after our check: the ServerApp refused this one
        reason = refusal_in_log(log_path)  # the app refused it (a strategy built otherwise than the store's)
        fail(f"{reason}; its log is {log_path}" if reason else
             f"the retrain run did not finish (flwr exit code {code}); nothing half-done was served; its log is "
             f"{log_path}; run `fedforget retrain` again", code=1)
    scrubbed = scrub_complete(handle)  # the requests this retrain completed
    summary = {"retrained_up_to_request": reached, "serving": info["serving"], "accuracy": info["accuracy"],
               "available": info["available"], "log": str(log_path), "scrubbed": scrubbed.requests}
    if as_json:
        emit(summary, True)
    else:
        console.print(f"[bold green]retrained[/] up to request #{reached}; serving {len(info['serving'])} "
                      f"artifact(s), {accuracy_line(info)}")
        if scrubbed.requests:
            console.print(escape(scrubbed.line(handle)), soft_wrap=True, highlight=False)


def verified(handle: Store, federation: str, verbose: bool, as_json: bool, include_all: bool = False,
             what: str = "retraining from scratch as the reference") -> dict:
    """``verify``'s report: the reference in process, or through ``federation`` (its failure exits 1)."""
    from fedforget.unlearning.verify import refuse_in_process, verify_store

    if not federation:
        refuse_in_process(handle.manifest())  # before the progress line: the refusal is the one line printed
        return reference_run(lambda: verify_store(handle, include_all=include_all), verbose, what)
    from fedforget.unlearning.verify_federation import ReferenceFailed, verify_through

    try:
        return verify_through(handle, federation, run_console(as_json), include_all=include_all)
    except ReferenceFailed as exc:
        fail(str(exc), code=1)


@app.command()
def verify(
    store: StoreOpt,
    include_all: Annotated[bool, typer.Option("--all", help="Also compare artifacts that are not served.")] = False,
    federation: ReferenceFederationOpt = "",
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Retrain from scratch on the data minus everything forgotten, as the reference (in process, or through
    the nodes with --federation); compare what is served with it bit for bit (-v shows the reference run's log)."""
    from fedforget.tasks.server_data import ServerTestError

    handle = open_store(store)
    try:
        result = verified(handle, federation, verbose, as_json, include_all=include_all)
    except (StoreError, LedgerUsageError, ServerTestError) as exc:
        fail(str(exc))
    if as_json:
        emit(result, True)
    else:
        unchecked = {u["artifact"] for u in result["not_checked"]}
        for c in result["compared"]:
            mark = "[green]equal[/]" if c["equal"] else "[red]DIFFERENT[/]"
            if c["artifact"] in unchecked:
                mark = "[yellow]not checked (DP)[/]"
            console.print(f" {'●' if c['served'] else ' '} {c['artifact']}: {mark}")
        for u in result["not_checked"]:
            console.print(f" [yellow]DP adapter not checked bit for bit[/]: {u['artifact']} ({u['why']})",
                          soft_wrap=True)
        for f in result["files"]:
            console.print(f" [red]served file {f['problem'].upper()}[/]: {f['artifact']} ({f['sha256'][:16]}…)")
        out = result["outputs"]
        console.print("served outputs on the test split: " + (
            ("[green]bit-identical[/]" if out["equal"] else "[red]DIFFERENT[/]") + f" ({out['examples']} examples)"
            if out["compared"] else f"not compared ({out['reason']})"))
        verdict = "[bold green]exact[/]" if result["exact"] else "[bold red]NOT exact[/]"
        console.print(f"{verdict}: {result['served_equal']}/{result['served']} served artifacts bit-identical to "
                      f"from-scratch training without {result['forgotten_samples']} forgotten sample(s)"
                      + (f" ({result['reason']})" if result["reason"] else "")
                      + (f"; {len(unchecked)} served DP adapter(s) not checked, named above" if unchecked else ""),
                      soft_wrap=True)
    if not result["exact"]:
        fail(f"NOT exact: {result['reason'] or 'a served artifact differs from scratch'}", code=1)


@app.command()
def audit(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """Membership inference on forgotten vs held-out samples, before and after forgetting (AUC)."""
    from fedforget.unlearning.audit import audit_store

    handle = open_store(store)
    with store_errors():
        result = audit_store(handle)
    if as_json:
        emit(result, True)
        return
    console.print(f"reads: the {result['reads']} (the forgotten and retained training rows)")
    before = result["before"]
    if before is None:
        console.print("before: not measured")
    else:
        said = {True: "memorised (told from held-out samples)", False: "not memorised",
                None: "undecided (too few forgotten samples)"}[before["memorised"]]
        console.print(f"before: {said} at request #{before['request']}; its losses and AUCs were computed on "
                      "the forgotten samples, so only this decision is kept", soft_wrap=True)
    r = result["after"]
    if r is None:
        console.print(" after: nothing served")
    else:
        lo, hi = r["loss_threshold_ci95"]
        slo, shi = r["shadow_ci95"]
        console.print(f" after: loss-threshold AUC {r['loss_threshold_auc']:.3f} [{lo:.3f}, {hi:.3f}] · "
                      f"shadow-model AUC {r['shadow_auc']:.3f} [{slo:.3f}, {shi:.3f}] "
                      f"({result['forgotten']} forgotten vs {result['held_out']} held-out)")
    for line in (result["verdict"], result["note"]):
        if line:
            console.print(f"[yellow]{line}[/]")


def known_request(handle: Store, request: int) -> None:
    """Exit 2 with one line unless ``request`` is a request recorded in the store's ledger."""
    try:
        ledger = handle.ledger()
        try:
            known = {r[0] for r in ledger.db.execute("SELECT id FROM requests")}
            last = ledger.last_request()
        finally:
            ledger.close()
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if request not in known:
        fail(f"unknown request {request}: " + (f"this store has requests 1..{last}" if last else
             "this store has no forget requests yet") + " (`fedforget status` counts them; nothing was written)")


def os_reason(exc: OSError) -> str:
    """``PATH: reason`` for an OSError, without errno noise."""
    return f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)


def new_receipt_key(as_json: bool) -> None:
    """``receipt --new-key``: make a new coordinator key on purpose and say where the old public half is kept."""
    from fedforget.unlearning.receipt import ReceiptKeyError, public_record_path, rotate_key

    try:
        path, print_, kept = rotate_key()
    except ReceiptKeyError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot make the receipt key: {os_reason(exc)}")
    record = public_record_path(path)
    if as_json:
        emit({"key": str(path), "fingerprint": print_, "public_key": str(record),
              "old_public_key": None if kept is None else str(kept)}, True)
        return
    console.print(escape(f"new receipt key {path} (fingerprint {print_}); its public key is {record}; receipts "
                         "signed before check only with " + (f"`--public-key {kept}`" if kept else
                                                              "the old public key (none was found to keep)")),
                  soft_wrap=True, highlight=False)


def check_receipt_file(check: str, public_key: str, store: str, as_json: bool) -> None:
    """``receipt --check``: exit 0 for a receipt unaltered byte for byte and signed by the key checked against
    (named as what it is), 1 with one line when not or when the ledger of ``store`` no longer matches it."""
    from pathlib import Path

    from fedforget.unlearning.receipt import (
        ReceiptError,
        ReceiptKeyError,
        check_receipt,
        coordinator_public_key,
        kept_key_for,
        load_public_key,
        read_receipt_file,
    )
    from fedforget.unlearning.receipt_ledger import compare_ledger

    try:
        data = read_receipt_file(Path(from_cwd(check)))
    except OSError as exc:
        fail(f"cannot read {check!r} as a receipt: {exc.strerror or exc}")
    try:
        key = load_public_key(Path(from_cwd(public_key)) if public_key else None)
        coordinator = key if not public_key else coordinator_public_key()
    except ReceiptKeyError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read the key: {os_reason(exc)}")
    try:
        body = check_receipt(data, key)
    except ReceiptError as exc:
        kept = None if public_key else kept_key_for(data)
        fail(f"receipt NOT valid: {exc}" + (f"; it is signed by an earlier coordinator key, replaced by "
                                            f"`--new-key`: check it with `--public-key {kept}`" if kept else ""),
             code=1)
    except ValueError as exc:
        fail(f"cannot read {check!r} as a receipt: it is not JSON ({exc.__class__.__name__})")
    from fedforget.unlearning.log_verify import LogProofError, receipt_proof

    try:
        proof = receipt_proof(body, key)
    except LogProofError as exc:
        fail(f"receipt NOT valid: {exc}", code=1)
    signer = "the coordinator's key" if not public_key else f"the key in {public_key} (" + (
        "the coordinator's key" if key == coordinator else "NOT the coordinator's key" if coordinator else
        "no coordinator key on this machine to compare with") + ")"
    ledger = None
    if store:
        handle = open_store(store)
        try:
            opened = handle.ledger()
            try:
                ledger = compare_ledger(opened, body)
            finally:
                opened.close()
        except (StoreError, LedgerUsageError) as exc:
            fail(str(exc))
        if ledger["differs"]:
            fail(f"receipt NOT valid: the ledger of {store} was edited after the receipt: it no longer holds "
                 "what the receipt certifies: " + "; ".join(ledger["differs"]), code=1)
    request_id = body["request"]["id"]
    if as_json:
        emit({"valid": True, "request": request_id, "store": body.get("store"), "signed_by": signer,
              "coordinator_key": None if coordinator is None else key == coordinator, "ledger": ledger,
              "log_proof": proof}, True)
        return
    said = ("; pass --store S to compare it with the ledger" if ledger is None and "ledger_digest" in body else
            "; it carries no ledger digest (issued by an older fedforget), so no ledger can be compared with it"
            if ledger is None or not ledger["digest"] else
            f"; the ledger of {store} matches it (serving plan: {ledger['serving']})")
    said += ("" if proof is None else f"; its forget entry #{proof['entry']} is in the log under the signed head of "
             f"{proof['size']} entries" if proof["entry"] is not None else
             f"; it was issued under the signed log head of {proof['size']} entries")
    console.print("[bold green]valid[/]: " + escape(f"receipt of request #{request_id} of {body.get('store')}, "
                                                    f"signed by {signer}, unaltered{said}"),
                  soft_wrap=True, highlight=False)


@app.command()
def receipt(
    request: Annotated[int | None, typer.Argument(help="The request id (`forget` prints it).",
                                                  click_type=REQUEST_ID)] = None,
    store: Annotated[str, typer.Option("--store", help="Store directory of a run (with --check: the store whose "
                                       "ledger the receipt must still match).")] = "",
    check: Annotated[str, typer.Option("--check", help="Check a receipt FILE's signature instead.")] = "",
    public_key: Annotated[str, typer.Option("--public-key", help="PEM key to check against (default: the "
                                            "coordinator's, see the docs' Erasure and receipts page).")] = "",
    skip_verify: Annotated[bool, typer.Option("--no-verify", help="Do not run `verify` into the receipt.")] = False,
    federation: ReferenceFederationOpt = "",
    new_key: Annotated[bool, typer.Option("--new-key", help="Make a new receipt key (the old one is lost or may "
                                          "have been read); earlier receipts then check only with the old public "
                                          "key, kept beside the new key. Pass it alone.")] = False,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """A signed deletion certificate for REQUEST (Ed25519), or `--check FILE` to verify one (exit 1 if not)."""
    from fedforget.unlearning.receipt import ReceiptKeyError, issue_receipt, load_or_create_key

    if new_key:
        if request is not None or check or store or public_key:
            fail("pass --new-key alone (`fedforget receipt --new-key`), then issue or check receipts")
        new_receipt_key(as_json)
        return
    if check:
        check_receipt_file(check, public_key, store, as_json)
        return
    if request is None or not store:
        fail("name a request and its store (`fedforget receipt 1 --store runs/x`), or --check FILE")
    handle = open_store(store, writes="receipt")
    known_request(handle, request)  # before the key and the from-scratch training of `verify`
    try:
        load_or_create_key(handle.root)  # a key problem is told before the from-scratch training of `verify`
        report = None
        if not skip_verify:
            report = verified(handle, federation, verbose, as_json,
                              what="verify: retraining from scratch as the reference")
        signed, out = issue_receipt(handle, request, report)  # written 0600, whole or not at all
    except (StoreError, LedgerUsageError, ReceiptKeyError, ValueError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot use the receipt key: {os_reason(exc)}")
    if as_json:
        emit(signed, True)
    else:
        v = signed["verify"]
        console.print(f"receipt of request #{request}: {len(signed['purged'])} artifact(s) purged · verify "
                      f"{'—' if v is None else 'exact' if v['exact'] else 'NOT exact'} · written to {out}",
                      soft_wrap=True)


@app.command()
def purge(
    store: StoreOpt,
    check: Annotated[bool, typer.Option("--check", help="Only list what should not be there; exit 1 if any.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete every file and value a forget request made obsolete (artifacts, client caches, feature caches,
    training metrics, audit measurements); `forget` does this itself, so this finishes a purge a crash
    interrupted, or with --check proves none is left: every file under the store is hashed and compared with
    the purged sha256s, whatever its name. Exit 1 while a copy is left, deployed nodes' copies not yet
    confirmed included (`fedforget forget --propagate` reaches them), or while a symlink out of the store,
    a fifo or a device under it keeps the check from proving it."""
    from fedforget.methods.registry import store_method
    from fedforget.store.purge import complete_purges

    handle = open_store(store, writes=None if check else "purge")
    try:
        report = complete_purges(handle, store_method(handle.manifest()), check=check, by_content=True).to_json()
        scrubbed = Scrub() if check else scrub_complete(handle)  # a purge this finished may complete a request
    except (StoreError, LedgerUsageError) as exc:
        fail(str(exc))
    if not check:
        report["scrubbed"] = scrubbed.requests
    copies = report["client-copies"]
    unprovable = any(report[k] for k in ("outside-links", "special-files", "unreadable"))
    if as_json:
        emit(report, True)
    else:
        for name in report["files"] + report["feature-caches"]:
            console.print(f" {'should not be there' if check else 'deleted'}: {name}")
        if scrubbed.requests:
            console.print(" " + escape(scrubbed.line(handle)), soft_wrap=True, highlight=False)
        if report["pending"]:
            console.print(f" purge pending for {len(report['pending'])} artifact(s)")
        if report["metrics-rows"]:
            console.print(f" {report['metrics-rows']} per-client metrics row(s) of clients that left")
        if report["training-rows"]:
            console.print(f" {report['training-rows']} metrics row(s) with training values computed on forgotten data")
        for key in report["ledger-values"]:
            console.print(f" ledger value {key!r} holds measurements of forgotten samples")
        for link in report["outside-links"]:
            console.print(f" refused: symlink {link} points outside the store (never followed); replace it with "
                          "the file or remove it", soft_wrap=True)
        for name in report["special-files"]:
            console.print(f" not a regular file (never opened): {name}; remove it", soft_wrap=True)
        for name in report["unreadable"]:
            console.print(f" cannot read {name}; make it readable", soft_wrap=True)
        if copies:
            console.print(f" {len(copies)} deployed node(s) (partition(s) {[c['partition'] for c in copies]}) may "
                          "still hold copies of purged artifacts in their caches until they acknowledge: run "
                          f"`fedforget forget --store {shlex.quote(store)} --propagate` (with --federation NAME, "
                          "the deployed nodes' SuperLink connection)", soft_wrap=True)
        local = any(report[k] for k in ("files", "pending", "feature-caches", "metrics-rows", "training-rows",
                                        "ledger-values"))
        if not copies and not unprovable and not (check and local):
            console.print("[bold green]clean[/]: nothing that saw forgotten data is left")
        else:
            console.print("[bold red]not clean[/]: " + ("run `fedforget purge` (without --check)" if check and local
                                                        else "what is listed above is left"))
    if copies or unprovable or (check and not report["clean"]):
        raise SystemExit(1)


# The service's commands (``fedforget serve``, ``fedforget token``): this module assembles the whole CLI, so it
# sits on the top floor, above the service (docs/architecture.md, "Floors").
add_service_commands(app)


@app.command()
def run(
    app_path: Annotated[str | None, typer.Argument(
        metavar="[APP]", help="The Flower app to run (its directory); default: the current directory when it "
        "is one, else fedforget's own app.", show_default=False)] = None,
    store: Annotated[str, typer.Option("--store", help="Store directory; default: the app's run-config store "
                                       "(fedforget's own app: runs/latest).", show_default=False)] = "",
    federation: Annotated[str, typer.Option(help="SuperLink connection in $FLWR_HOME/config.toml; default: its "
                                            "default connection.", envvar="FEDFORGET_FEDERATION",
                                            show_default=False)] = "",
    run_config: RunConfigOpt = "",
) -> None:
    """Train through `flwr run` with a progress bar, then print where the store is."""
    import os
    from pathlib import Path

    from fedforget.local_superlink import ports_env
    from fedforget.unlearning.flwr_runner import refusal_in_log
    from fedforget.unlearning.run_app import check_local_superlink, plan_run

    try:
        planned = plan_run(app_path, store, federation, run_config, Path.cwd())
        check_local_superlink(planned, {**os.environ, **ports_env()})
    except ValueError as exc:
        fail(str(exc))
    existing = resolve_store_path(planned.store)
    if (existing / "ledger.sqlite").is_file():
        ledger = Store(existing).ledger()
        try:
            if ledger.has_requests():
                fail(f"{existing} holds forget requests; pick a new --store (or `fedforget retrain` this one)")
        finally:
            ledger.close()
    console.print(f"running {escape(planned.app.describe())} on {escape(planned.federation)}, "
                  f"store {escape(planned.store)}")
    code, log_path = flwr_run(planned.federation, planned.run_config, planned.store, console,
                              app=planned.app.folder, home=None if planned.app.own else planned.app.folder)
    try:
        info = store_status(Store.open(planned.store))
    except StoreError:
        info = None
    if code != 0 or info is None or not info["serving"]:
        reason = refusal_in_log(log_path)
        fail(f"{reason}; its log is {log_path}" if reason else
             f"the Flower run did not finish (flwr exit code {code}); its log is {log_path}", code=1)
    console.print(f"[bold green]done[/]: {accuracy_line(info)}; store written to [bold]{info['store']}[/]")


def add_method_commands(cli: typer.Typer) -> None:
    """Each method's own commands (``fedforget theory``, ``fedforget fairness``), as it declares them."""
    from fedforget.methods.registry import FAMILIES

    for method in FAMILIES:
        if method.commands:
            method.commands(cli)


add_method_commands(app)


def add_log_commands(cli: typer.Typer) -> None:
    """``fedforget log``: export, verify and sign the ledger's log."""
    from fedforget.unlearning.log_cli import log_app

    cli.add_typer(log_app, name="log")


add_log_commands(app)


def add_data_commands(cli: typer.Typer) -> None:
    """``fedforget data``: nodes' own data directories (imported when the CLI is built, like the methods')."""
    from fedforget.unlearning.data_cli import data_app

    cli.add_typer(data_app, name="data")


add_data_commands(app)


def main(argv: list[str] | None = None) -> None:
    """The ``fedforget`` entry point: a usage error is one line on stderr and exit code 2 (no usage
    box, no traceback), like every other error the user must fix."""
    import sqlite3

    import click

    from fedforget.core.config import ConfigError

    try:
        code = app(args=argv, prog_name="fedforget", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else "fedforget --help")
        raise SystemExit(2) from None
    except click.ClickException as exc:
        where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) else ""
        fail(" ".join(exc.format_message().split()) + where, code=2)
    except click.exceptions.Abort:
        fail("aborted", code=130)
    except ConfigError as exc:  # a run config or app the user must fix (e.g. the app that trained a store moved)
        fail(str(exc), code=2)
    except (sqlite3.OperationalError, OSError) as exc:  # refused by a read-only store or file, in any command
        from fedforget.store.read_only import is_read_only_error

        if not is_read_only_error(exc):
            raise
        cause = (f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror) \
            if isinstance(exc, OSError) and exc.strerror else f"SQLite: {exc}"
        fail(f"{cause}: a read-only mount or a missing permission; remount it read-write or grant the "
             "permission, then run the command again")
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
