"""Message types and the serving rule that several methods share (the standard library only)."""

from fedforget.core.serving_plans import single_from_json

FORGET = "query.forget"  # a node deletes samples for good (tombstones): every LoRA-family method
CHAIN = "train.chain"  # a node trains one LoRA module on given slices, earlier modules frozen
QUERY = "query"  # a node describes its partition (discovery)
EVALUATE_SERVED = "evaluate.served"  # a node evaluates what is served on its own test records: every method
SINGLE_RULE = single_from_json  # one artifact: it or nothing
