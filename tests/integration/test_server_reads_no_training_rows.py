"""For every method, the ServerApp reads no client's training row: only nodes do, inside their handlers.

The loaders of the training pool ask :func:`fedforget.tasks.data_access.require_training_rows` first; a spy
records the role of every such read while each method trains, forgets and retrains in process (the
in-process Grid runs the nodes inside the ServerApp's call, so a server-side read would be seen here).
"""

from __future__ import annotations

import pytest

from fedforget.tasks import data_access, registry
from fedforget.tasks.data_access import TrainingRowsRefused, serving_role
from fedforget.unlearning.forget import forget_request

from .helpers import train_in_process
from .test_verify_what_is_served import METHODS

HOSFL = {"method": "sfl", "num-rounds": 2, "hosfl.clients-per-round": 2}


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str | None, str]]:
    seen: list[tuple[str | None, str]] = []
    real = data_access.require_training_rows

    def spy(what: str) -> None:
        seen.append((data_access.current_role(), what))
        real(what)

    monkeypatch.setattr(registry, "require_training_rows", spy)
    return seen


@pytest.mark.parametrize("method", [*sorted(METHODS), "sfl"])
def test_training_forgetting_and_retraining_read_training_rows_only_on_nodes(method, reads, tmp_path):
    config = HOSFL if method == "sfl" else METHODS[method]
    store = train_in_process(tmp_path / "s", 3, **config)
    forget_request(store, samples=[store.manifest()["partitions"]["1"][0][0]])
    train_in_process(tmp_path / "s", 3, **config, action="retrain")
    assert reads, "no node read its rows: the spy saw nothing, so this test proves nothing"
    assert {role for role, _ in reads} == {data_access.NODE}


def test_the_serving_role_refuses_the_training_pool():
    """Negative control: the guard the spy wraps does refuse a server-side read."""
    from fedforget.core.config import parse_run_config

    with serving_role(), pytest.raises(TrainingRowsRefused, match="never do"):
        registry.load_task_data(parse_run_config({"task": "digits-mlp"}))
