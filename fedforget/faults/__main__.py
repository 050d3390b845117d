"""``python -m fedforget.faults forget STORE --crashes N``: run a forget crash campaign in a process
without torch (forking it is then cheap and safe) and print the result as JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedforget.faults.campaign import forget_campaign


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m fedforget.faults")
    parser.add_argument("campaign", choices=["forget"])
    parser.add_argument("store", type=Path)
    parser.add_argument("--crashes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(forget_campaign(args.store, args.crashes, args.seed).to_json()))


if __name__ == "__main__":
    main()
