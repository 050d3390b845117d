"""The forget service's console says which evaluation each served accuracy is: the server's test set, and the
nodes' own test records when ``evaluate-on-nodes`` measured what is served."""

from __future__ import annotations

from fedforget.service.console import console_page

STATUS = {"accuracy": 0.91, "store": "s", "task": "digits-mlp", "method": "fedavg", "requests": {},
          "deletions_left": None}


def test_the_console_names_the_servers_and_the_nodes_accuracy():
    page = console_page({**STATUS, "federated_accuracy": {"accuracy": 0.875, "examples": 200, "nodes": 2}},
                        "plan", [], [])
    assert "<b id=accuracy>0.9100</b> (server's test set)" in page
    assert "<b id=accuracy-on-nodes>0.8750</b> (200 test records on 2 nodes)" in page


def test_without_the_nodes_evaluation_the_console_shows_the_servers_alone():
    page = console_page({**STATUS, "federated_accuracy": None}, "plan", [], [])
    assert "(server's test set)" in page and "accuracy-on-nodes" not in page
