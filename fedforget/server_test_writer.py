"""``python -m fedforget.server_test_writer write | write-defaults [--force]``: the separate process that writes
the server's test-only copy of a task's test split (:mod:`fedforget.tasks.server_data`), so that the process
asking for it never opens the public file that holds every client's training rows too.

It is a process of its own, assembled like every fedforget app: the methods' registry first (the run config it
is handed is parsed with every method's keys), then the writer."""

from __future__ import annotations

import sys

import fedforget.methods.registry  # noqa: F401  (hands the declarations to the run config's parser)
from fedforget.tasks.server_data import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
