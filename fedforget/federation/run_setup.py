"""What every method needs before its first round, on the server and on a client alike."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

import flwr
import numpy as np
import torch

from fedforget import __version__
from fedforget.core.config import ConfigError, RunConfig, is_user_task, stored_run_config
from fedforget.core.record_ids import LOCAL_RECORDS, RECORD_IDS, record_ids_field
from fedforget.core.seeds import derive_seed
from fedforget.core.slicing import iid_shares
from fedforget.federation.record_key import taken
from fedforget.federation.registration import Federation, check_against_manifest
from fedforget.federation.starting_model import Arrays, retrain_start, training_start
from fedforget.store import Store
from fedforget.store.initial_arrays import INITIAL_ARRAYS, record_initial_arrays
from fedforget.tasks.base import Backbone, Examples, TaskData
from fedforget.tasks.partitioning import PartitionPlan
from fedforget.tasks.peft_modules import TaskModel, build_task_model
from fedforget.tasks.registry import get_task
from fedforget.tasks.server_data import ServerTest
from fedforget.tasks.trained_parameters import trains_whole_model
from fedforget.tasks.whole_model import WholeModel, build_whole_model

DEFAULT_ADAPTER = "default"
#: run-config keys a retrain may set otherwise than the training did: none changes what is built
RETRAIN_MAY_CHANGE = ("action", "store", "evaluate-on-nodes")


@dataclass
class ModelBundle:
    #: LoRA + fedforget's head on the frozen backbone, or the user's own model as the whole model (``Task(train=...)``)
    model: TaskModel | WholeModel
    backbone: Backbone
    #: The seeded initial LoRA + head of the default adapter (the user's model: its trained parameters as built);
    #: what a run handed no initial arrays starts from.
    initial_state: dict[str, torch.Tensor]


_MODELS: dict[tuple[object, ...], ModelBundle] = {}


def build_model(cfg: RunConfig, num_classes: int) -> ModelBundle:
    """The task's frozen backbone with a seeded LoRA adapter and head (cached per process).

    A cached model is handed out reset to its seeded initial state, with only the default adapter
    active, so nothing from an earlier call in the same process can change a result.
    """
    key = (cfg.task, cfg.hf.model, cfg.lora_r, cfg.lora_alpha, cfg.seed, num_classes)
    if key not in _MODELS:
        _MODELS.clear()
        task = get_task(cfg.task)
        backbone = task.load_backbone(cfg, cfg.seed)
        if trains_whole_model(task.trains):
            whole = build_whole_model(backbone.module, task.trains, cfg.task)
            _MODELS[key] = ModelBundle(whole, backbone, whole.trainable_state(DEFAULT_ADAPTER))
        else:
            model = build_task_model(backbone, num_classes, cfg.lora_r, cfg.lora_alpha, cfg.seed, DEFAULT_ADAPTER,
                                     head=task.head)
            _MODELS[key] = ModelBundle(model, backbone, model.trainable_state(DEFAULT_ADAPTER))
    bundle = _MODELS[key]
    if isinstance(bundle.model, WholeModel):
        bundle.model.activate([DEFAULT_ADAPTER], trainable=[DEFAULT_ADAPTER])
        bundle.model.load_trainable_state(DEFAULT_ADAPTER, bundle.initial_state)
        return bundle
    bundle.model.activate([DEFAULT_ADAPTER], trainable=[DEFAULT_ADAPTER])
    for name in bundle.model.adapter_names:
        if name != DEFAULT_ADAPTER:
            bundle.model.body.delete_adapter(name)
    bundle.model.activate([DEFAULT_ADAPTER], trainable=[DEFAULT_ADAPTER])
    bundle.model.load_trainable_state(DEFAULT_ADAPTER, bundle.initial_state)
    return bundle


def local_test_share(data: TaskData, partition: int, num_partitions: int, seed: int) -> Examples:
    """A client's share of the test split, for client-side evaluation."""
    shares = iid_shares(data.test.ids.tolist(), num_partitions, derive_seed(seed, "test-shares"))
    return data.test.by_ids(shares[partition])


def build_manifest(cfg: RunConfig, plan: PartitionPlan, backbone: Backbone, num_partitions: int,
                   backbone_artifact: str | None) -> dict[str, object]:
    """The manifest: task, config, seeds, the sample → partition → unit map."""
    return {
        "task": cfg.task,
        "method": cfg.method,
        "config": cfg.to_dict(),
        "seed": cfg.seed,
        "num-partitions": num_partitions,
        "partitions": plan.to_json(),
        "backbone": {
            "source": backbone.source,
            "weights-sha256": backbone.weights_sha256,
            "artifact": backbone_artifact,
        },
        "versions": {
            "fedforget": __version__,
            "flwr": flwr.__version__ if hasattr(flwr, "__version__") else "",
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }


@dataclass
class ServerRun:
    """A run as the server sees it: the registered federation, its own test set, never a client's sample."""

    cfg: RunConfig
    federation: Federation
    test: Examples
    num_classes: int
    bundle: ModelBundle
    store: Store
    #: the strategy whose ``start`` runs this (its hooks are called once per round), None outside one
    strategy: Any = None
    #: the initial arrays the store's training started from, in the seeded start's order (None: the seeded start)
    initial_arrays: Arrays | None = None

    @property
    def initial_state(self) -> dict[str, torch.Tensor]:
        """What a one-model run starts from: the store's initial arrays, else the seeded initial LoRA + head."""
        if self.initial_arrays is None:
            return self.bundle.initial_state
        return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in self.initial_arrays.items()}

    @property
    def nodes(self) -> dict[int, int]:
        """partition → node id, as the nodes registered."""
        return self.federation.nodes

    @property
    def plan(self) -> PartitionPlan:
        """Each partition's slices of sample ids, as the nodes drew them."""
        return self.federation.plan


def prepare_server_run(cfg: RunConfig, federation: Federation, server_test: ServerTest,
                       record_key: str | None = None, initial_arrays: Arrays | None = None) -> ServerRun:
    """Create the store for a fresh run, its manifest built from what the nodes registered; ``record_key``: the
    key the nodes keyed their own records' sample ids with, kept in the manifest when a node has such records.
    ``initial_arrays`` (handed to ``start``) are checked against the seeded start before the store exists, and
    recorded in it."""
    bundle = build_model(cfg, server_test.num_classes)
    start = training_start(cfg, initial_arrays, bundle.initial_state)
    store = Store.create(cfg.store, {})
    backbone_artifact = None
    if bundle.backbone.project_trained:
        fresh = get_task(cfg.task).load_backbone(cfg, cfg.seed).module  # unwrapped by peft
        state = {k: v.detach().numpy() for k, v in fresh.state_dict().items()}
        backbone_artifact = store.put_arrays(state, {"kind": "backbone", "task": cfg.task})
    manifest = build_manifest(cfg, federation.plan, bundle.backbone, len(federation.nodes), backbone_artifact)
    manifest["nodes"] = federation.manifest_nodes()
    if record_key is not None and LOCAL_RECORDS in federation.records.values():
        manifest[RECORD_IDS] = record_ids_field(record_key)
    if is_user_task(cfg.task):
        from fedforget.tasks.user_task import app_of_task

        app = app_of_task(cfg.task)  # the app the coordinator submits for a retrain, a propagate, a verify
        if app is not None:
            manifest["app"] = app
        from fedforget.tasks.task_functions import manifest_entry

        manifest.update(manifest_entry(get_task(cfg.task)))  # its own loss and metric, if it has them
    if federation.class_counts:
        manifest["class-counts"] = {str(p): c for p, c in sorted(federation.class_counts.items())}
    if start is not None:
        manifest[INITIAL_ARRAYS] = record_initial_arrays(store, start, cfg.task)
    store.update_manifest(**manifest)
    taken(store.root)
    return ServerRun(cfg, federation, server_test.examples, server_test.num_classes, bundle, store,
                     initial_arrays=start)


def open_server_run(cfg: RunConfig, federation: Federation, server_test: ServerTest,
                    initial_arrays: Arrays | None = None) -> ServerRun:
    """Re-open the store of an earlier run (``action='retrain'``), refusing a different config or data.

    Retraining must rebuild with exactly the config that trained the store, and on the data that trained
    it less what was forgotten, else "the same plan" would silently mean something else. The plan is the
    manifest's, never the replies': the nodes only confirm it. It starts from the initial arrays the store
    recorded; ``initial_arrays`` handed to ``start`` must be those.
    """
    store = Store.open(cfg.store)
    manifest = store.manifest()
    stored = stored_run_config(manifest["config"])
    asked = cfg.to_dict()
    differ = sorted(k for k in stored if k not in RETRAIN_MAY_CHANGE and stored[k] != asked.get(k))
    if differ:
        shown = differ[:4]
        more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
        raise ConfigError(f"this {cfg.action} builds the strategy with "
                          f"{', '.join(f'{k}={asked.get(k)!r}' for k in shown)}{more}, and the store was trained with "
                          f"{', '.join(f'{k}={stored[k]!r}' for k in shown)}; build it as the store recorded (in the "
                          "ServerApp's code, or declare the keys in [tool.flwr.app.config] so that `fedforget retrain` "
                          "passes the stored values)")
    if int(manifest["num-partitions"]) != len(federation.nodes):
        raise ValueError(f"the store was trained with {manifest['num-partitions']} partitions but "
                         f"{len(federation.nodes)} nodes are connected")
    ledger = store.ledger()
    try:
        forgotten = {i for ids in ledger.forgotten_by_partition().values() for i in ids}
    finally:
        ledger.close()
    check_against_manifest(federation, manifest, forgotten)
    changed = None
    if is_user_task(cfg.task):
        from fedforget.tasks.task_functions import retrain_entry

        changed = retrain_entry(manifest, get_task(cfg.task))  # refuses another loss; records another metric
    federation.plan = PartitionPlan({int(p): [[int(i) for i in s] for s in slices]
                                     for p, slices in manifest["partitions"].items()})
    bundle = build_model(cfg, server_test.num_classes)
    start = retrain_start(store, initial_arrays, bundle.initial_state)
    if changed is not None:
        store.update_manifest(**changed)
    return ServerRun(cfg, federation, server_test.examples, server_test.num_classes, bundle, store,
                     initial_arrays=start)
