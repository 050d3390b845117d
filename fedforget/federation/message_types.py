"""Message types and serving functions that several methods share (names only: the standard library)."""

FORGET = "query.forget"  # a node deletes samples for good (tombstones): every LoRA-family method
CHAIN = "train.chain"  # a node trains one LoRA module on given slices, earlier modules frozen
QUERY = "query"  # a node describes its partition (discovery)
LORA_SERVING = "fedforget.federation.serve:lora_probabilities"  # one LoRA + head model per served artifact
SINGLE_RULE = "fedforget.core.serving_plans:single_from_json"  # one artifact: it or nothing
MODULE_TRAINING = "fedforget.federation.module_training:train_chain_position"  # the CHAIN message's handler
