"""FedShard: a tree of LoRA modules over client shards, merged in product space; a forget retrains the
affected branch."""

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, LORA_SERVING, MODULE_TRAINING

METHOD = Method(
    name="fedshard",
    variants=("fedshard",),
    driver="fedforget.methods.fedshard.server:run_fedshard",
    handlers={"train.fedshard": MODULE_TRAINING},  # the chains' module training, in its own namespace
    serving=LORA_SERVING,
    serving_rules={"fedshard": "fedforget.methods.fedshard.plan:fedshard_serving"},
    forget_message=FORGET,
    config="fedforget.methods.fedshard.config:FedShardConfig",
    footprint="fedforget.methods.fedshard.footprint:footprint",
    planning=("fedforget.methods.fedshard.config", "fedforget.methods.fedshard.plan",
              "fedforget.methods.fedshard.costs", "fedforget.methods.fedshard.angles",
              "fedforget.methods.fedshard.lora_merge", "fedforget.methods.fedshard.footprint"),
    ledger_rules=("fedforget.methods.fedshard.ledger_rules:scrub_leaver_angles",),
    status="fedforget.methods.fedshard.status:status",
    print_status="fedforget.methods.fedshard.status:print_status",
    prepare_scratch="fedforget.methods.fedshard.verify:prepare_scratch",
    commands="fedforget.methods.fedshard.cli:add_commands",
    progress={r"FedShard stage (\d+)/(\d+)": "FedShard stages"},  # server.py logs it per stage
)
