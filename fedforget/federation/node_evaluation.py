"""A node evaluates what is served on its own test records: the one handler of ``evaluate.served``, whatever
the method (the method's declared ``serving`` hook turns the plan into class probabilities, as on the server).

A node's test records are its own records' ``test`` split (``data-dir``; a node without one holds none), or, for a
node on a shipped task's public set, its seeded share of the public test split: every node a different share,
so the nodes' example-weighted mean covers the split once.
"""

from __future__ import annotations

from flwr.app import Context, Message

from fedforget.federation.client_site import ClientSite
from fedforget.federation.evaluate_messages import EvaluateResult, EvaluateServed
from fedforget.tasks.base import Examples


def node_test_examples(site: ClientSite) -> Examples:
    """This node's test records: its own ``test`` split, or its share of the public test split."""
    if site.data_dir is not None:
        return site.data.test
    from fedforget.federation.run_setup import local_test_share

    return local_test_share(site.data, site.partition, site.num_partitions, site.cfg.seed)


def served_metrics(request: EvaluateServed, site: ClientSite, test: Examples) -> EvaluateResult:
    """Accuracy and loss of what ``request`` serves on ``test`` (none: zero examples, it abstains), and the task's
    own metric values."""
    if not len(test):
        return EvaluateResult(site.partition, 0.0, 0.0, 0)
    from fedforget.federation.serve import probability_metrics, serving_probabilities
    from fedforget.tasks.task_functions import task_metric, task_prediction

    probs = serving_probabilities(site.cfg, request.num_classes, request.store(site.state_dir), request.plan,
                                  request.serving, list(request.artifacts), test.inputs)
    result = probability_metrics(probs, test.targets, task_metric(site.cfg), task_prediction(site.cfg))
    own = {k: float(v) for k, v in result.items() if k not in ("accuracy", "loss", "num-examples")}
    return EvaluateResult(site.partition, result["accuracy"], result["loss"], int(result["num-examples"]), own)


def evaluate_served(msg: Message, context: Context) -> Message:
    """Answer ``evaluate.served`` with this node's accuracy, loss and number of test records."""
    site = ClientSite.from_context(context)
    request = EvaluateServed.from_record(msg.content)
    return Message(served_metrics(request, site, node_test_examples(site)).to_record(), reply_to=msg)
