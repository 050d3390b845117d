"""Write ``$FLWR_HOME/config.toml`` with the project's two SuperLink connections.

``local-simulation`` is Flower's managed local SuperLink on the Ray simulation engine, 10 nodes of
one CPU each; ``local-deployment`` is the loopback SuperLink that ``make deploy-up`` starts
(``local-deployment-tls`` for ``make deploy-up TLS=1``, trusting the CA in ``.deploy/certs``);
``docker`` / ``docker-tls`` reach the SuperLink that ``docker compose up`` publishes on port 8000.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIMULATION_NODES = 10
DEPLOY_PORT = int(os.environ.get("FEDFORGET_DEPLOY_PORT", "39200"))


DOCKER_PORT = 8000


def render(simulation_nodes: int = SIMULATION_NODES, deploy_address: str = f"127.0.0.1:{DEPLOY_PORT}",
           root: Path | None = None) -> str:
    root = root or Path.cwd()
    return f"""# Written by fedforget (tools/setup.sh); `flwr run . <name>` picks one of these connections.
[superlink]
default = "local-simulation"

[superlink.local-simulation]
address = ":local:"
options.num-supernodes = {simulation_nodes}
options.backend.client-resources.num-cpus = 1

[superlink.local-deployment]
address = "{deploy_address}"
insecure = true

[superlink.local-deployment-tls]
address = "{deploy_address}"
root-certificates = "{root / '.deploy' / 'certs' / 'ca.crt'}"

[superlink.docker]
address = "127.0.0.1:{DOCKER_PORT}"
insecure = true

[superlink.docker-tls]
address = "127.0.0.1:{DOCKER_PORT}"
root-certificates = "{root / 'deploy' / 'certs' / 'ca.crt'}"
"""


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else Path(os.environ["FLWR_HOME"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(root=path.resolve().parent.parent), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
