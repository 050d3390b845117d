"""A Flower strategy the user built, made forgettable in the user's own ServerApp: ``Forgettable(ClippedFedAvg(...))``
with a deterministic ``aggregate_train`` override trains, forgets, retrains through the app, and ``fedforget verify
--federation`` (its reference run is the app's own ServerApp with ``reference=true`` and a scratch store, played in
process) is exact; negative control: the same store verified in process, where the recorded app is this checkout
(fedforget's own components), which builds the plain parent class from the keys, is not. A retrain that builds
another strategy than the store recorded (another class, other attributes, other keys, fedforget's own app) refuses
in one line with nothing written; so do a DP wrapper and a non-deterministic override before the store exists, and a
subclass that keeps state of its own or sends to other nodes than the round's, before its first round is recorded.
Two runs of one ``Forgettable(FedAdam(...))`` instance share no server state (negative control: one shared copy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flwr.app import Array, ArrayRecord, Context
from flwr.common.config import parse_config_args
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAdam, FedAvg, FedProx
from typer.testing import CliRunner

from fedforget.core.config import ConfigError
from fedforget.inprocess import run_in_process
from fedforget.methods.replay.strategy import RECORDED, Forgettable
from fedforget.store import Store
from fedforget.strategies import start_from_context
from fedforget.unlearning import verify_federation
from fedforget.unlearning.cli import app as cli_app

from ....flower_subclasses import ClippedFedAvg, NoisyFedAvg
from ...helpers import artifact_rows, artifact_shas, copy_store, served_ids

NODES = 3
ROUNDS = 4
KEYS = {"task": "digits-mlp", "lr": 0.02, "local_epochs": 1, "slices_per_client": 1, "train_size": 300,
        "test_size": 100, "num_rounds": ROUNDS}
runner = CliRunner()


class RememberingFedAvg(FedAvg):
    """Averages with the previous round's model: server state of its own, which no checkpoint holds."""

    previous: ArrayRecord | None = None

    def aggregate_train(self, server_round, replies):  # noqa: ANN001, ANN201
        arrays, metrics = super().aggregate_train(server_round, replies)
        if self.previous is not None:
            arrays = ArrayRecord({k: Array((v.numpy() + self.previous[k].numpy()) / 2) for k, v in arrays.items()})
        self.previous = arrays
        return arrays, metrics


class DroppingFedProx(FedProx):
    """Sends the round to all but the first node it is handed: not the round fedforget drew."""

    def configure_train(self, server_round, arrays, config, grid):  # noqa: ANN001, ANN201
        return list(super().configure_train(server_round, arrays, config, grid))[1:]


def _clipped(clip: float = 0.05) -> ClippedFedAvg:
    return ClippedFedAvg(clip=clip, fraction_train=0.34)


def users_app(build) -> ServerApp:  # noqa: ANN001
    """The user's ServerApp: the strategy built in code, started with the coordinator's action."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        start_from_context(build(), grid, context)

    return app


def run_config(strategy: Forgettable) -> dict[str, object]:
    """The app's run config: what the nodes read (the strategy's keys)."""
    return {k: v for k, v in strategy.config.to_dict().items() if k != "action"}


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("clipped") / "store"
    strategy = Forgettable(_clipped(), store=str(path), **KEYS)
    run_in_process(run_config(strategy), NODES, server_app=users_app(lambda: strategy))
    return path


def _forget_late_partition(store: Store) -> None:
    first: dict[int, int] = {}
    for row in store.metrics():
        for p in row.get("trained", []):
            first.setdefault(int(p), int(row["round"]))
    late = max(first, key=lambda p: (first[p], p))
    sample = store.manifest()["partitions"][str(late)][0][0]
    forgot = runner.invoke(cli_app, ["forget", "--store", str(store.root), "--sample", str(sample), "--json"])
    assert forgot.exit_code == 0, forgot.output


def _retrain(store: Store, app: ServerApp | None) -> None:
    """``fedforget retrain``'s run: the stored config, ``action=retrain``, through ``app`` (None: fedforget's)."""
    config = {**store.manifest()["config"], "store": str(store.root), "action": "retrain"}
    run_in_process(config, NODES, server_app=app)


def _verify_through(store: Store, app: ServerApp, monkeypatch) -> dict:  # noqa: ANN001
    """``verify --federation``, its Flower run of the app played in process by the same nodes."""

    def flwr_run(federation, submitted, store_dir, console, app=None):  # noqa: ANN001, ANN202
        config = parse_config_args([submitted])
        assert config["action"] == "train" and config["reference"] is True
        assert app == Path(store.manifest()["app"]["dir"])  # the app whose code defines the subclass
        run_in_process({**config, "store": store_dir}, NODES, server_app=reference_app)
        return 0, Path(store_dir) / "flwr-run.log"

    reference_app = app
    monkeypatch.setattr(verify_federation, "flwr_run", flwr_run)
    result = runner.invoke(cli_app, ["verify", "--store", str(store.root), "--federation", "fake", "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_a_deterministic_override_trains_forgets_retrains_and_verifies_exactly_through_its_app(
        trained, tmp_path, monkeypatch):
    store = copy_store(trained, tmp_path)
    assert store.manifest()[RECORDED]["class"].endswith(".ClippedFedAvg")
    assert store.manifest()[RECORDED]["attributes"]["clip"] == 0.05
    assert (Path(store.manifest()["app"]["dir"]) / "pyproject.toml").is_file()  # the app holding ClippedFedAvg
    app = users_app(lambda: Forgettable(_clipped(), store="runs/built-in-code", **KEYS))  # the run's store wins
    before = {a: r["sha256"] for a, r in artifact_rows(store).items()}
    _forget_late_partition(store)
    _retrain(store, app)
    after = {a: r["sha256"] for a, r in artifact_rows(store).items()}
    assert served_ids(store) == [f"replay/round-{ROUNDS}"] and after != before
    assert all(r["valid"] for r in artifact_rows(store).values())
    report = _verify_through(store, app, monkeypatch)
    assert report["exact"] is True and report["federation"] == "fake", report
    assert not (store.root / verify_federation.SCRATCH).exists()
    monkeypatch.undo()
    # negative control: in process, the recorded app (this checkout, whose components are fedforget's own app's)
    # builds the plain FedAvg the keys name
    plain = json.loads(runner.invoke(cli_app, ["verify", "--store", str(store.root), "--json"]).stdout)
    assert plain["exact"] is False, plain


def test_the_override_is_what_ran(trained, tmp_path):
    """The clip changes the rounds: the plain FedAvg with the same keys serves other bytes."""
    path = tmp_path / "plain"
    strategy = Forgettable(FedAvg(fraction_train=0.34), store=str(path), **KEYS)
    run_in_process(run_config(strategy), NODES, server_app=users_app(lambda: strategy))
    assert artifact_shas(Store.open(path)) != artifact_shas(Store.open(trained))
    assert RECORDED not in Store.open(path).manifest()  # Flower's own class: its keys rebuild it


@pytest.mark.parametrize(("build", "why"), [
    (lambda: Forgettable(FedAvg(fraction_train=0.34), **KEYS),
     r"rounds were run by .*ClippedFedAvg, and this run builds Flower's FedAvg"),
    (lambda: Forgettable(_clipped(clip=0.5), **KEYS), r"ClippedFedAvg built with other clip"),
    (None, r"rounds were run by .*ClippedFedAvg, and this run builds Flower's FedAvg"),  # fedforget's own app
])
def test_a_retrain_that_builds_another_strategy_than_the_store_recorded_is_refused(trained, tmp_path, build, why):
    store = copy_store(trained, tmp_path)
    _forget_late_partition(store)
    before = tree_bytes(store.root)
    with pytest.raises(ConfigError, match=why) as refused:
        _retrain(store, users_app(build) if build else None)
    assert "\n" not in str(refused.value)
    assert tree_bytes(store.root) == before


def test_a_retrain_through_an_app_that_now_builds_other_parameters_is_refused(tmp_path):
    path = tmp_path / "store"
    keys = {**KEYS, "num_rounds": 1}
    strategy = Forgettable(FedProx(proximal_mu=0.1), store=str(path), **keys)
    run_in_process(run_config(strategy), NODES, server_app=users_app(lambda: strategy))
    store = Store.open(path)
    before = tree_bytes(path)
    now = users_app(lambda: Forgettable(FedProx(proximal_mu=0.2), store=str(path), **keys))
    with pytest.raises(ConfigError, match=r"run with replay.proximal-mu=0.1, and this run builds "
                                          r"replay.proximal-mu=0.2") as refused:
        _retrain(store, now)
    assert "\n" not in str(refused.value) and tree_bytes(path) == before
    started = Forgettable(FedProx(proximal_mu=0.2), store=str(path), **keys)  # started without the run config
    with pytest.raises(ConfigError, match=r"run with replay.proximal-mu=0.1, and this run builds "
                                          r"replay.proximal-mu=0.2") as refused:
        started.start(grid=None, action="retrain")  # type: ignore[arg-type] # refused before the grid is used
    assert "\n" not in str(refused.value) and tree_bytes(path) == before


@pytest.mark.parametrize(("flower", "why"), [
    (lambda: DifferentialPrivacyServerSideFixedClipping(FedAvg(), 1.0, 1.0, 2), "adds noise drawn without a seed"),
    (NoisyFedAvg, r"NoisyFedAvg.aggregate_train draws random numbers"),
])
def test_what_cannot_be_replayed_is_refused_in_one_line_with_nothing_written(tmp_path, flower, why):
    path = tmp_path / "store"
    config = run_config(Forgettable(FedAvg(), store=str(path), **KEYS))
    with pytest.raises(ConfigError, match=why) as refused:
        run_in_process(config, NODES, server_app=users_app(lambda: Forgettable(flower(), store=str(path), **KEYS)))
    assert "cannot be replayed exactly" in str(refused.value) and "\n" not in str(refused.value)
    assert not path.exists()


def test_two_runs_of_one_forgettable_fedadam_share_no_server_state(tmp_path, monkeypatch):
    """The same instance trains two stores (the run config's store is each run's): the same bytes, and the
    user's FedAdam keeps no moments. Negative control: one copy shared by both runs carries the moments over."""
    mine = FedAdam(eta=0.05, fraction_train=0.34)
    strategy = Forgettable(mine, **KEYS)
    app = users_app(lambda: strategy)
    for name in ("a", "b"):
        run_in_process({**run_config(strategy), "store": str(tmp_path / name)}, NODES, server_app=app)
    assert artifact_shas(Store.open(tmp_path / "a")) == artifact_shas(Store.open(tmp_path / "b"))
    assert mine.m_t is None and mine.v_t is None
    shared = strategy.flower_strategy()
    monkeypatch.setattr(Forgettable, "flower_strategy", lambda self: shared)
    for name in ("c", "d"):
        run_in_process({**run_config(strategy), "store": str(tmp_path / name)}, NODES, server_app=app)
    assert artifact_shas(Store.open(tmp_path / "c")) == artifact_shas(Store.open(tmp_path / "a"))
    assert artifact_shas(Store.open(tmp_path / "d")) != artifact_shas(Store.open(tmp_path / "c"))


def test_a_subclass_that_keeps_state_of_its_own_is_refused_before_its_first_round_is_recorded(tmp_path):
    """Its first round changes an attribute no checkpoint holds: refused in one line, no round recorded."""
    path = tmp_path / "store"
    strategy = Forgettable(RememberingFedAvg(fraction_train=0.34), store=str(path), **KEYS)
    with pytest.raises(ConfigError, match="its rounds change previous, server state a checkpoint does not hold") as e:
        run_in_process(run_config(strategy), NODES, server_app=users_app(lambda: strategy))
    assert "\n" not in str(e.value)
    assert not artifact_rows(Store.open(path))


def test_a_configure_train_that_sends_to_other_nodes_than_it_is_handed_is_refused_at_the_round(tmp_path):
    path = tmp_path / "store"
    strategy = Forgettable(DroppingFedProx(fraction_train=0.34), store=str(path), **KEYS)
    with pytest.raises(ConfigError, match="DroppingFedProx.configure_train sent round 1 to other nodes") as e:
        run_in_process(run_config(strategy), NODES, server_app=users_app(lambda: strategy))
    assert "\n" not in str(e.value)
    assert not artifact_rows(Store.open(path))
