"""Records every file a Python process opens, when ``FEDFORGET_OPEN_AUDIT`` names a log (tests only).

Put on ``PYTHONPATH`` of a deployment, it is imported by every Python process the deployment starts (the
SuperLink's ServerApp process, the SuperNodes' ClientApp processes), so a test can say which process
opened which file. Each line is ``[pid, argv, path]`` as JSON; the hook writes with ``os`` calls under a
re-entrancy guard, since writing the log is itself an open.
"""

import json
import os
import sys

_LOG = os.environ.get("FEDFORGET_OPEN_AUDIT")
_busy = False


def _hook(event, args):
    global _busy
    if event != "open" or _busy or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    _busy = True
    try:
        path = os.fsdecode(args[0])
        fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps([os.getpid(), " ".join(sys.argv), path]) + "\n").encode())
        finally:
            os.close(fd)
    except Exception:  # an audit that fails must not change what it watches
        pass
    finally:
        _busy = False


if _LOG:
    sys.addaudithook(_hook)
