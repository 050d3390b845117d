"""What a Flower user imports to run fedforget in an app of their own: a task of their own model and data
(:class:`Task`), and fedforget's ClientApp: the app's ``client_app.py`` holds ``from fedforget.client import app``
and ``__all__ = ["app"]`` (Flower's check of ``[tool.flwr.app.components]`` reads the module without importing it).

    # mlpapp/task.py
    TASK = Task(name="tabular-mlp", backbone=make_mlp, feature_dim=32, lora_targets=["fc1", "fc2"], num_classes=10)

and ``task = "mlpapp.task:TASK"`` in the app's ``[tool.flwr.app.config]``. fedforget wraps the backbone in its own
LoRA adapters (on the modules ``lora_targets`` names) and a linear head; the backbone stays frozen. Each node
holds its records as a node data directory (``record_id``, ``label`` and ``input_column``, or a column per number
named by ``input_columns``), simulated nodes the one the run config's ``node-data`` names; the server
evaluates on ``test-data``, a records directory of the same form, and with ``evaluate-on-nodes`` the nodes on
their own ``test`` split (docs/your-app.md).

Neither torch nor the task code is imported until a task is loaded: the ClientApp is imported anew for every
Flower message. :class:`Task` lives with the other task code (:mod:`fedforget.tasks.user_task`).
"""

from __future__ import annotations

from fedforget.client_app import app
from fedforget.tasks.user_task import Task

__all__ = ["Task", "app"]
