"""Keep an in-process Flower run's log off the terminal, feeding a one-line progress instead.

``verify`` (and ``receipt``, which runs it) retrain from scratch in this process: Flower's strategy log
(~50 lines for a small FedAvg run) would bury the 3-line verdict. Inside :func:`quiet_flwr_log` the
``flwr`` logger's records go to a buffer instead of its handlers (errors still reach the terminal);
the ServerApp's progress lines ("round k/n", and each method's own, which its declaration's ``progress`` names)
call ``on_progress(done, total, what)``; on an exception the buffered log is printed after all.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fedforget.unlearning.flwr_runner import ROUND_LINE, method_progress

Progress = Callable[[int, int, str], None]


def progress_of(line: str) -> tuple[int, int, str] | None:
    """``(done, total, unit)`` of a ServerApp progress line, else None."""
    if (match := ROUND_LINE.search(line)) is not None:
        return int(match[1]), int(match[2]), "rounds"
    if (found := method_progress(line)) is not None:
        unit, done, total = found
        return done, total, unit
    return None


class _Capture(logging.Handler):
    def __init__(self, on_progress: Progress | None, passthrough: list[logging.Handler]) -> None:
        super().__init__(logging.DEBUG)
        self.on_progress = on_progress
        self.passthrough = passthrough
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        self.lines.append(f"{record.levelname}: {message}")
        if record.levelno >= logging.ERROR:
            for handler in self.passthrough:
                if record.levelno >= handler.level:
                    handler.handle(record)
        found = progress_of(message)
        if found is not None and self.on_progress is not None:
            self.on_progress(*found)


@contextmanager
def quiet_flwr_log(on_progress: Progress | None = None, enabled: bool = True) -> Iterator[list[str]]:
    """Inside the block, the ``flwr`` logger's output is buffered (the yielded list) instead of printed."""
    if not enabled:
        yield []
        return
    from flwr.common.logger import FLOWER_LOGGER  # importing flwr adds its console handler: do it first

    logger = FLOWER_LOGGER
    handlers = list(logger.handlers)
    capture = _Capture(on_progress, handlers)
    for handler in handlers:
        logger.removeHandler(handler)
    logger.addHandler(capture)
    try:
        yield capture.lines
    except BaseException:
        print("\n".join(capture.lines[-60:]), file=sys.stderr)
        raise
    finally:
        logger.removeHandler(capture)
        for handler in handlers:
            logger.addHandler(handler)
