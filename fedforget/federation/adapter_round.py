"""One round of local training of a LoRA adapter + head on a node's own slices: what every method whose
training is rounds of local steps on one adapter does with a train message (fedavg's ``train``, replay's
``train.replay``), written once.

The message's config says which ``adapter``, ``artifact`` and ``server-round`` (they seed the data order),
which ``slices`` (all of the node's when absent), whether to evaluate the received model first
(``evaluate-received``) and, from Flower's FedProx, ``proximal-mu``. A method with a loss term of its own
passes it to :func:`train_adapter` from its handler."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict

from fedforget.core.seeds import derive_seed
from fedforget.federation.client_site import ClientSite
from fedforget.federation.messaging import PARTITION_KEY, RECEIVED, to_numpy
from fedforget.federation.node_evaluation import node_test_examples
from fedforget.federation.run_setup import build_model
from fedforget.tasks.task_functions import task_loss, task_train_step
from fedforget.training.supervised import LossTerm, TrainSettings, evaluate, train_supervised


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v.copy()) for k, v in to_numpy(record).items()}


def _evaluate_share(site: ClientSite, model: torch.nn.Module) -> dict[str, float]:
    """Accuracy and loss of ``model`` on this client's share of the public test split, or on its own test
    records (a node with its own data, which may hold none)."""
    test = node_test_examples(site)
    return evaluate(model, test.inputs, test.targets)


def train_adapter(msg: Message, context: Context, loss_term: LossTerm | None = None) -> Message:
    """Load the received adapter + head, train it on this partition's data, send it back.

    With ``evaluate-received`` in the config the client first evaluates the model it received on its
    share of the test split and adds ``received-accuracy``, ``received-loss`` and ``received-examples``
    to the reply: the previous round's evaluation rides on this round's message instead of a message
    (and, on a deployment, a ClientApp process) of its own. Evaluation trains nothing and draws no
    random numbers, so the trained state is the same either way. ``loss_term`` is added to each batch's
    cross-entropy, or to the task's own loss (:class:`~fedforget.training.supervised.TrainSettings`): a
    method's own client-side term.
    """
    site = ClientSite.from_context(context)
    config = msg.content["config"]
    adapter = str(config.get("adapter", "default"))
    artifact = str(config.get("artifact", "global"))
    server_round = int(config.get("server-round", 0))
    slices = [int(s) for s in config["slices"]] if "slices" in config else None
    examples = site.slice_examples(slices)
    model = build_model(site.cfg, site.data.num_classes).model
    model.activate([adapter], trainable=[] if site.cfg.head_only else [adapter])  # head-only: a linear probe
    model.load_trainable_state(adapter, _tensors(msg.content["arrays"]))
    received = _evaluate_share(site, model) if bool(config.get("evaluate-received", False)) else None
    cfg = site.cfg
    settings = TrainSettings(
        epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr, optimizer=cfg.optimizer,
        seed=derive_seed(cfg.seed, cfg.method, artifact, server_round, site.partition, "train-order"),
        proximal_mu=float(config.get("proximal-mu", 0.0)), loss_term=loss_term, loss=task_loss(cfg),
        train_step=task_train_step(cfg),
    )
    result = train_supervised(model, examples.inputs, examples.targets, settings)
    metrics = MetricRecord({"num-examples": result.num_examples, "train-loss": result.mean_loss,
                            PARTITION_KEY: site.partition})
    if received is not None:
        metrics.update({f"{RECEIVED}accuracy": received["accuracy"], f"{RECEIVED}loss": received["loss"],
                        f"{RECEIVED}examples": int(received["num-examples"])})
    return Message(RecordDict({"arrays": ArrayRecord(model.trainable_state(adapter)), "metrics": metrics}),
                   reply_to=msg)


def evaluate_adapter(msg: Message, context: Context) -> Message:
    """Evaluate the received adapter + head on this client's share of the test split."""
    site = ClientSite.from_context(context)
    adapter = str(msg.content["config"].get("adapter", "default"))
    model = build_model(site.cfg, site.data.num_classes).model
    model.activate([adapter], trainable=[adapter])
    model.load_trainable_state(adapter, _tensors(msg.content["arrays"]))
    result = _evaluate_share(site, model)
    metrics = MetricRecord({"num-examples": int(result["num-examples"]), "accuracy": result["accuracy"],
                            "loss": result["loss"], PARTITION_KEY: site.partition})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
