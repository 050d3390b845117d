"""Replay: Flower's own strategies (FedAvg, FedProx, FedAvgM, FedAdagrad, FedAdam, FedYogi) made forgettable.

Every round's global model (and the strategy's server state) is a checkpoint whose lineage is every
partition that trained up to it; a forget invalidates the rounds from the first that saw the data, and a
retrain rolls back to the last round that did not and replays the rest without it."""

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, LORA_SERVING, SINGLE_RULE

METHOD = Method(
    name="replay",
    variants=("replay",),
    driver="fedforget.methods.replay.server:run_replay",
    handlers={"train.replay": "fedforget.federation.adapter_round:train_adapter"},
    serving=LORA_SERVING,
    serving_rules={"replay": SINGLE_RULE},
    forget_message=FORGET,
    config="fedforget.methods.replay.config:ReplayConfig",
    planning=("fedforget.methods.replay.config", "fedforget.methods.replay.plan"),
    plan_artifacts="fedforget.methods.replay.plan:plan_artifacts",
)
