"""What every worker process the broker spawns (segment copies, log cleaning) sets up first."""

from __future__ import annotations

import sys

import structlog


def configure_logging(log_level: int) -> None:
    """Log like the broker (structlog, console format) to stderr, which the worker shares."""
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"),
                    structlog.processors.format_exc_info,
                    structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(log_level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr))
