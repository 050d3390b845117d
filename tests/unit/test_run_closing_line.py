"""A run's closing line says what is served: its accuracy, or that nothing is served, never 'accuracy nan'."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from fedforget.federation import driver


@pytest.mark.parametrize(("result", "serving", "said"), [
    ({"accuracy": float("nan")}, {"available": False, "artifacts": []}, "nothing is served"),
    ({"accuracy": 0.8944}, {"available": True, "artifacts": ["a"]}, "serving accuracy 0.8944"),
], ids=["nothing-served", "served"])
def test_the_closing_line_says_nothing_is_served_instead_of_nan(monkeypatch, result, serving, said):
    monkeypatch.setattr(driver, "finish_pending_purges", lambda *_args: None)
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    flwr = logging.getLogger("flwr")
    flwr.addHandler(handler)
    try:
        built = SimpleNamespace(metrics=None, manifest=None, summary="retrain rebuilt 0 artifact(s)")
        server = SimpleNamespace(finished=lambda *_args: None, cfg=SimpleNamespace(method="fedavg"))
        driver._finish(server, SimpleNamespace(store=None), None, built, result, serving, {"action": "retrain"})
    finally:
        flwr.removeHandler(handler)
    [line] = [line for line in lines if line.startswith("fedforget: retrain")]
    assert line == f"fedforget: retrain rebuilt 0 artifact(s); {said}" and "nan" not in line
