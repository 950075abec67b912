"""Where and how every tierd process logs: structlog lines on stderr.

One setup for the broker, ``tierd admin`` and the worker processes the broker
spawns (segment copies, log cleaning), which share the broker's stderr.
"""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


def configure_logging(level: int | str, json_lines: bool = False) -> None:
    """structlog to stderr at ``level`` (a name in ``LEVELS`` or a ``logging`` level):
    readable console lines, or JSON objects."""
    renderer = (structlog.processors.JSONRenderer() if json_lines
                else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            LEVELS[level] if isinstance(level, str) else level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
