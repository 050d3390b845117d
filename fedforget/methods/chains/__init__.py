"""Sequence-sharded LoRA chains (FedSGT, S3T, SISA, FedCIO): a forget serves the prefixes that never saw
the data."""

from fedforget.core.method import Method
from fedforget.federation.message_types import CHAIN, FORGET, MODULE_TRAINING

METHOD = Method(
    name="chains",
    variants=("fedsgt", "s3t", "sisa", "fedcio"),
    driver="fedforget.methods.chains.server:run_chains",
    handlers={CHAIN: MODULE_TRAINING},
    serving="fedforget.methods.chains.serve:chain_probabilities",
    serving_rules={"chains": "fedforget.methods.chains.plan:serving_from_json"},
    forget_message=FORGET,
    config="fedforget.methods.chains.config:ChainsConfig",
    defaults="fedforget.methods.chains.config:DEFAULTS",
    footprint="fedforget.methods.chains.footprint:footprint",
    size_keys={
        "fedsgt": ("lora-r", "chains.groups", "chains.budget", "slices-per-client"),
        "s3t": ("lora-r", "chains.groups", "chains.budget", "chains.shards", "slices-per-client"),
        "sisa": ("lora-r", "chains.groups", "chains.shards", "slices-per-client"),
        "fedcio": ("lora-r", "chains.clusters", "slices-per-client"),
    },
    planning=("fedforget.methods.chains.plan", "fedforget.methods.chains.grouping",
              "fedforget.methods.chains.sequences", "fedforget.methods.chains.serving",
              "fedforget.methods.chains.theory", "fedforget.methods.chains.config",
              "fedforget.methods.chains.footprint"),
    forget_detail="fedforget.methods.chains.coordinator:forget_detail",
    plan_artifacts="fedforget.methods.chains.coordinator:plan_artifacts",
    status="fedforget.methods.chains.coordinator:status",
    print_status="fedforget.methods.chains.coordinator:print_status",
    commands="fedforget.methods.chains.cli:add_commands",
    progress={r"(\d+)/(\d+) chain positions trained": "chain positions"},  # server.py logs it per position
    crash_points=("chains:position-recorded",),  # server.py, once a position's artifact is recorded
)
