"""SAFE (with ProtoSISA and SAFE-DP): per-clique adapters; a forget drops the cliques that saw the data."""

from fedforget.core.method import HeldSamples, Method

METHOD = Method(
    name="safe",
    variants=("safe", "protosisa"),
    driver="fedforget.methods.safe.server:run_safe",
    handlers={
        "train.safe": "fedforget.methods.safe.client:train_cliques",
        "query.safeproto": "fedforget.methods.safe.client:prototype_sums",
        "query.safeforget": "fedforget.federation.forget_client:forget_samples",  # the one node forget handler
    },
    serving="fedforget.methods.safe.serve:served_probabilities",
    serving_rules={"safe": "fedforget.methods.safe.graph:safe_serving"},
    forget_message="query.safeforget",
    config="fedforget.methods.safe.config:SafeConfig",
    defaults="fedforget.methods.safe.config:DEFAULTS",
    footprint="fedforget.methods.safe.footprint:footprint",
    size_keys={v: ("safe.adapter-width", "safe.coarse", "safe.fine", "num-rounds", "slices-per-client")
               for v in ("safe", "protosisa")},
    planning=("fedforget.methods.safe.config", "fedforget.methods.safe.graph", "fedforget.methods.safe.dp",
              "fedforget.methods.safe.shard_plan", "fedforget.methods.safe.budget",
              "fedforget.methods.safe.footprint"),
    forget_detail="fedforget.methods.safe.coordinator:forget_detail",
    forget_check="fedforget.methods.safe.coordinator:refuse_safe_shard_ids",
    ledger_rules=("fedforget.methods.safe.budget_store:charge_dp_budget",),
    status="fedforget.methods.safe.coordinator:status",
    print_status="fedforget.methods.safe.coordinator:print_status",
    submit_check="fedforget.methods.safe.coordinator:check_before_submit",
    prepare_scratch="fedforget.methods.safe.verify:prepare_scratch",
    dp_exposure="fedforget.methods.safe.verify:dp_exposure",
    feature_caches=("safe-features-*",),  # the backbone's tokens (features.CACHE_PREFIX): a node's forget drops them
    held_samples=HeldSamples(key="safe-shard-ids", name="safe shard", report="safe_shard"),  # shard.py draws it
)
