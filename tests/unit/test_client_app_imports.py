"""Each Flower message starts a fresh ClientApp process, so what the ClientApp module and the light
handlers import is paid per message: they must not pull the training stack. Each check runs in a
fresh interpreter; a negative control shows the probe does see a heavy import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HEAVY = ("torch", "peft", "transformers", "datasets", "flwr_datasets", "seaborn", "scipy")


def heavy_modules_after(code: str, env: dict[str, str] | None = None) -> list[str]:
    """Run ``code`` in a fresh interpreter and list the heavy packages it left in ``sys.modules``."""
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import json, sys
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_client_app_module_imports_without_the_training_stack():
    assert heavy_modules_after("import fedforget.client_app") == []


def test_query_and_forget_handlers_import_only_flwr_and_numpy():
    assert heavy_modules_after("import fedforget.federation.client_site, fedforget.federation.forget_client") == []


def test_probe_sees_a_heavy_import():
    assert "torch" in heavy_modules_after("import fedforget.training.determinism")


def test_every_methods_forget_message_runs_the_one_handler_without_torch(tmp_path: Path):
    """A node that has drawn its plan once answers a forget message, ``query.forget`` or SAFE's
    ``query.safeforget``, with the one handler: without loading torch or the data, and dropping the feature
    caches a method declares (derived from samples it may have just deleted)."""
    env = {"FEDFORGET_CACHE": str(tmp_path / "cache")}
    setup = f"""
        import fedforget.methods.registry  # as the ClientApp does: it hands the methods to the config parser
        from flwr.app import Context, RecordDict
        run_config = {{"task": "digits-mlp", "train-size": 300, "test-size": 100, "seed": 3,
                       "store": {str(tmp_path / "store")!r}}}
        def context(partition):
            return Context(run_id=1, node_id=1, node_config={{"partition-id": partition, "num-partitions": 3,
                           "state-dir": {str(tmp_path / "node")!r} + str(partition)}}, state=RecordDict(),
                           run_config=run_config)
    """
    first = setup + """
        from fedforget.federation.client_site import ClientSite
        print(ClientSite.from_context(context(1)).held_slices()[0][0])
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(first)], capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    sample = int(proc.stdout.strip().splitlines()[-1])
    forget = setup + f"""
        import numpy as np
        from flwr.app import Array, ArrayRecord, Message, RecordDict
        from flwr.supercore.task_identity import TaskIdentity
        from pathlib import Path
        from fedforget.methods.registry import client_handlers
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
        cache = Path({str(tmp_path / "node1")!r}) / "safe-features-train.safetensors"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(b"tokens")
        samples = ArrayRecord({{"samples": Array(np.array([{sample}], dtype=np.int64))}})
        for kind, deleted in (("query.safeforget", 1), ("query.forget", 0)):
            msg = Message(RecordDict({{"arrays": samples}}), dst_node_id=1, message_type=kind)
            reply = client_handlers()[kind](msg, context(1))
            assert reply.content["info"]["deleted"] == deleted, reply.content
        assert not cache.exists()
    """
    assert heavy_modules_after(forget, env) == []


def test_method_registry_imports_only_the_standard_library():
    """The ClientApp reads the registry in every per-message process: its declarations' hooks import their
    code when called."""
    code = """
        import sys
        before = set(sys.modules)
        import fedforget.methods.registry
        added = {m.split(".")[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)
        assert added == {"fedforget"}, sorted(added)
    """
    assert heavy_modules_after(code) == []


def test_core_and_store_import_no_method():
    """Shared floors get a method's declaration handed down; importing them loads none (and no registry)."""
    code = """
        import sys
        import fedforget.core, fedforget.core.config, fedforget.core.defaults, fedforget.core.run_footprint
        import fedforget.core.serving_plans, fedforget.store, fedforget.store.purge, fedforget.store.check
        loaded = sorted(m for m in sys.modules if m.startswith("fedforget.methods"))
        assert loaded == [], loaded
    """
    assert heavy_modules_after(code) == []


def test_no_code_is_named_by_a_string():
    """Declarations hold functions and classes, never ``"module:function"`` strings to import."""
    import re

    pattern = re.compile(r"[\"']fedforget\.[\w.]+:\w+[\"']")
    package = Path(__file__).resolve().parents[2] / "fedforget"
    named = [f"{p.relative_to(package)}: {m.group(0)}" for p in sorted(package.rglob("*.py"))
             for m in pattern.finditer(p.read_text(encoding="utf-8"))]
    assert named == []
