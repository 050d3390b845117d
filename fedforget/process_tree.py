"""Stopping a process with everything it started: a SuperLink takes its simulation and Ray with it."""

from __future__ import annotations

import psutil


def kill_tree(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM a process and its descendants, then SIGKILL what is left."""
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [root, *root.children(recursive=True)]
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
