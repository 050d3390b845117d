"""HO-SFL with SFL and ZO-SFL: split learning whose clients train with forward passes only; a forget
retrains from scratch without the forgotten data."""

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, SINGLE_RULE

METHOD = Method(
    name="hosfl",
    variants=("hosfl", "sfl", "zo-sfl"),
    driver="fedforget.methods.hosfl.server:run_split_method",
    handlers={
        "train.forward": "fedforget.methods.hosfl.client:forward",
        "train.zo": "fedforget.methods.hosfl.client:zo_phase",
        "train.backprop": "fedforget.methods.hosfl.client:backprop",
    },
    serving="fedforget.methods.hosfl.serve:split_probabilities",  # one [θ_c; θ_s] artifact
    serving_rules={"split": SINGLE_RULE},
    forget_message=FORGET,
    config="fedforget.methods.hosfl.config:HosflConfig",
    defaults="fedforget.methods.hosfl.config:DEFAULTS",
    planning=("fedforget.methods.hosfl.config", "fedforget.methods.hosfl.plan",),
    status="fedforget.methods.hosfl.coordinator:status",
    print_status="fedforget.methods.hosfl.coordinator:print_status",
)
