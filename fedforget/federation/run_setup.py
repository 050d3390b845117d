"""What every method needs before its first round, on the server and on a client alike."""

from __future__ import annotations

import platform
from dataclasses import dataclass

import flwr
import torch

from fedforget import __version__
from fedforget.core.config import RunConfig, stored_run_config
from fedforget.core.seeds import derive_seed
from fedforget.core.slicing import iid_shares
from fedforget.store import Store
from fedforget.tasks.base import Backbone, Examples, TaskData
from fedforget.tasks.partitioning import PartitionPlan
from fedforget.tasks.peft_modules import TaskModel, build_task_model
from fedforget.tasks.registry import get_task, load_task_data, partition_plan

DEFAULT_ADAPTER = "default"


@dataclass
class ModelBundle:
    model: TaskModel
    backbone: Backbone
    #: The seeded initial LoRA + head of the default adapter; what a fresh run starts from.
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
        backbone = get_task(cfg.task).load_backbone(cfg, cfg.seed)
        model = build_task_model(backbone, num_classes, cfg.lora_r, cfg.lora_alpha, cfg.seed, DEFAULT_ADAPTER)
        _MODELS[key] = ModelBundle(model, backbone, model.trainable_state(DEFAULT_ADAPTER))
    bundle = _MODELS[key]
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
    cfg: RunConfig
    nodes: dict[int, int]
    data: TaskData
    plan: PartitionPlan
    bundle: ModelBundle
    store: Store


def prepare_server_run(cfg: RunConfig, nodes: dict[int, int]) -> ServerRun:
    """Load the task, plan the partitions and create the store for a fresh run."""
    data = load_task_data(cfg)
    plan = partition_plan(cfg, len(nodes))
    bundle = build_model(cfg, data.num_classes)
    store = Store.create(cfg.store, {})
    backbone_artifact = None
    if bundle.backbone.project_trained:
        fresh = get_task(cfg.task).load_backbone(cfg, cfg.seed).module  # unwrapped by peft
        state = {k: v.detach().numpy() for k, v in fresh.state_dict().items()}
        backbone_artifact = store.put_arrays(state, {"kind": "backbone", "task": cfg.task})
    store.update_manifest(**build_manifest(cfg, plan, bundle.backbone, len(nodes), backbone_artifact))
    return ServerRun(cfg, nodes, data, plan, bundle, store)


def open_server_run(cfg: RunConfig, nodes: dict[int, int]) -> ServerRun:
    """Re-open the store of an earlier run (``action='retrain'``), refusing a different config.

    Retraining must rebuild with exactly the config that trained the store, else "the same plan"
    would silently mean something else.
    """
    store = Store.open(cfg.store)
    manifest = store.manifest()
    stored = stored_run_config(manifest["config"])
    asked = cfg.to_dict()
    differ = sorted(k for k in stored if k not in ("action", "store") and stored[k] != asked.get(k))
    if differ:
        raise ValueError(f"retrain run config differs from the store's in {', '.join(differ)}; "
                         "use `fedforget retrain`, which passes the stored config")
    if int(manifest["num-partitions"]) != len(nodes):
        raise ValueError(f"the store was trained with {manifest['num-partitions']} partitions but "
                         f"{len(nodes)} nodes are connected")
    data = load_task_data(cfg)
    plan = partition_plan(cfg, len(nodes))
    bundle = build_model(cfg, data.num_classes)
    return ServerRun(cfg, nodes, data, plan, bundle, store)
