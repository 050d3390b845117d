"""FedAvg-LoRA: one adapter averaged over rounds; a forget retrains from scratch without the forgotten
data."""

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, LORA_SERVING, SINGLE_RULE

METHOD = Method(
    name="fedavg",
    variants=("fedavg",),
    driver="fedforget.methods.fedavg.server:run_fedavg",
    handlers={
        "train.fedavg": "fedforget.federation.adapter_round:train_adapter",
        "evaluate.fedavg": "fedforget.federation.adapter_round:evaluate_adapter",
    },
    serving=LORA_SERVING,
    serving_rules={"single": SINGLE_RULE},
    forget_message=FORGET,
    config=None,
    head_only=True,  # head-only=true trains the head alone on the frozen backbone: a linear probe
)
