"""Print ``name==version`` for a distribution and everything it requires, as installed here.

tools/docker_images.sh downloads exactly these into the wheelhouse of the flwr stand-in images, so
they carry the versions this host's venv runs (flwr's own pins may name releases the index lacks).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata


def closure(root: str) -> dict[str, str]:
    seen: dict[str, str] = {}
    todo = [root]
    while todo:
        name = re.split(r"[\s\[<>=!~;(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed
        seen[name] = dist.version
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
    return seen


if __name__ == "__main__":
    for name, version in sorted(closure(sys.argv[1]).items()):
        print(f"{name}=={version}")
