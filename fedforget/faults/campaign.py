"""Crash campaigns: kill the coordinator (``forget``) and the retrain run at injected points and at
random times, then check that nothing was lost or half applied and that a restart finishes the job.

``forget`` runs in a forked child (no torch in it, so forking is safe and costs milliseconds);
retrain runs the real ServerApp and ClientApp in process, in children of a fork server that has
imported torch and fedforget once. Children die by ``os._exit`` at an injected point
(``FEDFORGET_CRASH_POINT``) or by a real ``SIGKILL`` from this process at a random moment.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fedforget.core.config import stored_run_config
from fedforget.methods.registry import FAMILIES
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.copy import copy_store
from fedforget.store.crash import CRASH_ENV

FORGET_POINTS = ("forget:request-row", "forget:forgotten-rows", "forget:invalidated", "forget:before-commit")
#: points passed once per retrain, and points passed once per artifact (or file) written
RETRAIN_ONCE = ("retrain:forget-sent", "retrain:before-finish", "ledger:finish-retrain")
RETRAIN_EACH = (*(p for method in FAMILIES for p in method.crash_points), "atomic:before-rename",
                "ledger:record-artifact")
Tick = Callable[[int], None]


@dataclass
class CampaignResult:
    """What a campaign did and found; every ``*_found`` count must be zero."""

    requests: int = 0
    crashes: int = 0
    injected: int = 0
    killed: int = 0
    applied_after_crash: int = 0
    pending_after_crash: int = 0
    half_applied_found: int = 0
    lost_found: int = 0
    inconsistent_found: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _snapshot(store: Store) -> dict[str, Any]:
    """The state a forget request changes: forgotten samples, artifact validity, the serving plan."""
    ledger = store.ledger()
    try:
        return {"forgotten": sorted(r[0] for r in ledger.db.execute("SELECT sample FROM forgotten")),
                "valid": sorted(ledger.valid_artifacts()),
                "serving": ledger.serving(), "requests": ledger.last_request()}
    finally:
        ledger.close()


def _random_request(rng: random.Random, store: Store, forgotten: set[int]) -> dict[str, list]:
    """Mostly 1-3 samples not forgotten yet (some already forgotten: idempotence), sometimes a slice
    or a whole client."""
    parts = store.manifest()["partitions"]
    partition = rng.choice(sorted(parts))
    kind = rng.random()
    if kind < 0.92:
        ids = [i for s in parts[partition] for i in s if i not in forgotten or rng.random() < 0.02]
        return {"samples": rng.sample(ids, k=min(len(ids), rng.randint(1, 3))), "slices": [], "clients": []}
    if kind < 0.98:
        return {"samples": [], "slices": [f"{partition}:{rng.randrange(len(parts[partition]))}"], "clients": []}
    return {"samples": [], "slices": [], "clients": [int(partition)]}


def _forget(store_root: Path, request: dict[str, list]) -> None:
    from fedforget.unlearning.forget import forget_request

    forget_request(Store.open(store_root), request["samples"], request["slices"], request["clients"])


def _forget_child(store_root: Path, request: dict[str, list], point: str | None) -> int:
    """Fork a coordinator that runs one ``forget``; return its pid (the caller reaps it)."""
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        code = 0
        try:
            if point:
                os.environ[CRASH_ENV] = point
            _forget(store_root, request)
        except BaseException:  # noqa: BLE001 - a child must never run the parent's code
            code = 3
        os._exit(code)
    return pid


def forget_campaign(store_root: Path, crashes: int, seed: int = 0, kill_share: float = 0.3,
                    tick: Tick | None = None) -> CampaignResult:
    """Forget random requests, crashing the coordinator until ``crashes`` crashes happened.

    After each crash the store must pass :func:`check_store`, and the request must be either applied
    whole or absent (pending: the user runs it again). It is then re-run, as a user would, and the
    state must equal that of an oracle store that saw the same requests without any crash. When
    little is left to forget, both start again from a copy of the original store.
    """
    start = time.monotonic()
    rng = random.Random(seed)
    pristine = store_root.parent / f"{store_root.name}-pristine"
    oracle_root = store_root.parent / f"{store_root.name}-oracle"
    for path in (pristine, oracle_root):
        shutil.rmtree(path, ignore_errors=True)
        copy_store(store_root, path)
    store, oracle = Store.open(store_root), Store.open(oracle_root)
    ledger = store.ledger()
    total = ledger.num_samples()
    ledger.close()
    if total - len(_snapshot(store)["forgotten"]) < 10:
        raise ValueError(f"{store_root} has fewer than 10 samples left to forget; use a freshly trained store")
    result = CampaignResult()
    rounds, made = 0, [oracle_root]
    while result.crashes < crashes:
        before = _snapshot(store)
        if total - len(before["forgotten"]) < 10:  # start a new round from a copy of the original store
            rounds += 1  # at new paths: a store copied back over its own path is a rollback the check refuses
            store_root = pristine.parent / f"{pristine.name}-round{rounds}"
            oracle_root = pristine.parent / f"{pristine.name}-round{rounds}-oracle"
            for path in (store_root, oracle_root):
                shutil.rmtree(path, ignore_errors=True)
                copy_store(pristine, path)
                made.append(path)
            store, oracle = Store.open(store_root), Store.open(oracle_root)
            continue
        request = _random_request(rng, store, set(before["forgotten"]))
        result.requests += 1
        kill = rng.random() < kill_share
        pid = _forget_child(store_root, request, None if kill else rng.choice(FORGET_POINTS))
        if kill:
            time.sleep(rng.uniform(0.0, 0.03))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
        crashed = os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 137
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
            result.problems.append(f"forget raised for {request}")
        if crashed:
            result.crashes += 1
            result.killed += int(kill)
            result.injected += int(not kill)
            _after_crash(store, before, result)
            if tick:
                tick(1)
        _forget(store_root, request)  # the user's retry (a no-op if the request was applied)
        _forget(oracle_root, request)
        if _snapshot(store) != _snapshot(oracle):
            result.lost_found += 1
            result.problems.append(f"state differs from the oracle after {request}")
    for path in (pristine, *made):
        shutil.rmtree(path, ignore_errors=True)
    result.seconds = time.monotonic() - start
    return result


def _after_crash(store: Store, before: dict[str, Any], result: CampaignResult) -> None:
    check = check_store(store)
    half = [p for p in check.problems if "half" in p]
    result.half_applied_found += len(half)
    result.inconsistent_found += len(check.problems) - len(half)
    result.problems += check.problems
    after = _snapshot(store)
    if after["requests"] == before["requests"]:
        result.pending_after_crash += 1
        if after != before:  # absent, yet something changed: half applied
            result.half_applied_found += 1
            result.problems.append("a crashed request left changes without its request row")
    else:
        result.applied_after_crash += 1


# -- retrain ---------------------------------------------------------------------------------------
_CONTEXT: Any = None


def _context() -> Any:
    """A fork server that has imported torch and the app once; its children start in milliseconds."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["torch", "fedforget.inprocess", "fedforget.server_app",
                                         "fedforget.client_app", "fedforget.faults.campaign"])
    return _CONTEXT


def _retrain_child(store_root: str, point: str | None) -> None:
    import logging

    from fedforget.inprocess import run_in_process

    logging.getLogger("flwr").setLevel(logging.WARNING)
    if point:
        os.environ[CRASH_ENV] = point
    store = Store.open(store_root)
    manifest = store.manifest()
    config = {**stored_run_config(manifest["config"]), "action": "retrain", "store": str(store_root)}
    run_in_process(config, int(manifest["num-partitions"]))


def run_retrain(store_root: Path, point: str | None = None, kill_after: float | None = None) -> tuple[bool, float]:
    """One retrain in a child process; returns (finished, seconds). ``kill_after``: SIGKILL it then."""
    proc = _context().Process(target=_retrain_child, args=(str(store_root), point))
    started = time.monotonic()
    proc.start()
    proc.join(kill_after)
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    return proc.exitcode == 0, time.monotonic() - started


def served_state(store_root: Path) -> dict[str, Any]:
    """What retrain must reproduce: every artifact's sha256 and validity, the serving plan, the bytes."""
    store = Store.open(store_root)
    ledger = store.ledger()
    try:
        artifacts = {a["artifact"]: (a["sha256"], a["valid"]) for a in ledger.artifacts()}
        serving = ledger.serving()
        watermark = ledger.retrained_watermark()
    finally:
        ledger.close()
    intact = all(store.verify_artifact(artifacts[a][0]) for a in serving.get("artifacts", []))
    return {"artifacts": artifacts, "serving": serving, "watermark": watermark, "served-intact": intact}


@dataclass
class RetrainCampaignResult:
    jobs: int = 0
    crashes: int = 0
    injected: int = 0
    killed: int = 0
    inconsistent_found: int = 0
    unfinished_after_restart: int = 0
    mismatched_after_restart: int = 0
    reference_seconds: float = 0.0
    restart_seconds: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def retrain_campaign(template: Path, workdir: Path, crashes: int, max_crashes_per_job: int = 4, seed: int = 0,
                     kill_share: float = 0.3, tick: Tick | None = None) -> RetrainCampaignResult:
    """Crash retrains of copies of ``template`` (a store with pending forget requests), up to
    ``max_crashes_per_job`` times each and ``crashes`` times in all; restart each job and compare it
    with an uninterrupted retrain of the same template."""
    start = time.monotonic()
    rng = random.Random(seed)
    result = RetrainCampaignResult()
    reference_root = workdir / "reference"
    copy_store(template, reference_root)
    warm = _context().Process(target=os.getpid)  # start the fork server before timing anything
    warm.start()
    warm.join()
    finished, result.reference_seconds = run_retrain(reference_root)
    if not finished:
        raise RuntimeError("the uninterrupted reference retrain failed")
    reference = served_state(reference_root)
    before = served_state(template)["artifacts"]
    rebuilt = max(1, sum(1 for a, (sha, _) in reference["artifacts"].items() if sha != before.get(a, (None,))[0]))
    duration = result.reference_seconds
    while result.crashes < crashes:
        root = workdir / f"job{result.jobs}"
        copy_store(template, root)
        result.jobs += 1
        for _ in range(max_crashes_per_job):
            kill = rng.random() < kill_share
            if rng.random() < 0.25:
                point = f"{rng.choice(RETRAIN_ONCE)}@1"
            else:
                point = f"{rng.choice(RETRAIN_EACH)}@{rng.randint(1, rebuilt)}"
            kill_after = rng.uniform(0.05, duration) if kill else None
            finished, seconds = run_retrain(root, None if kill else point, kill_after)
            if finished:
                duration = min(duration, seconds)
                break  # the crash came too late: this retrain finished
            result.crashes += 1
            result.killed += int(kill)
            result.injected += int(not kill)
            check = check_store(Store.open(root))
            result.inconsistent_found += len(check.problems)
            result.problems += check.problems
            if tick:
                tick(1)
        finished, seconds = run_retrain(root)  # the restart
        result.restart_seconds.append(seconds)
        if not finished:
            result.unfinished_after_restart += 1
            result.problems.append(f"job {result.jobs}: the restarted retrain failed")
        elif served_state(root) != reference:
            result.mismatched_after_restart += 1
            result.problems.append(f"job {result.jobs}: restarted retrain differs from the uninterrupted one")
        shutil.rmtree(root, ignore_errors=True)
    result.seconds = time.monotonic() - start
    return result
