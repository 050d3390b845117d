"""``python -m fedforget.faults forget STORE --crashes N``: run a forget crash campaign in a process
without torch (forking it is then cheap and safe) and print the result as JSON.
``python -m fedforget.faults forget-many STORE --samples 1,2,3``: one coordinator forgetting each
sample as its own request (the concurrency test and benchmark run two of these at once)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from fedforget.faults.campaign import forget_campaign
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m fedforget.faults")
    parser.add_argument("campaign", choices=["forget", "forget-many"])
    parser.add_argument("store", type=Path)
    parser.add_argument("--crashes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", default="")
    args = parser.parse_args()
    if args.campaign == "forget":
        print(json.dumps(forget_campaign(args.store, args.crashes, args.seed).to_json()))
        return
    start, requests = time.monotonic(), []
    for sample in (int(s) for s in args.samples.split(",") if s):
        result = forget_request(Store.open(args.store), samples=[sample])
        requests.append(result.request)
    print(json.dumps({"requests": requests, "seconds": time.monotonic() - start}))


if __name__ == "__main__":
    main()
