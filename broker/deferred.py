"""Answers that are not ready when their request has been handled.

Theory of operation: a connection handles its requests one at a time, in
order, and answers them in that order (the protocol requires it). Most
handlers finish at once; an acks=all produce has done its part (the append,
in request order) long before its answer is due (when the ISR has the
records). Waiting for it inside the handler would hold every later request
on the connection behind one replication round: a producer's pipelined
requests to five partitions would take five rounds instead of one.

So such a handler returns a ``Deferred``: its effects are done, and
``finish()`` waits for what the answer needs and returns the response. The
connection starts ``finish`` as a task of its own, goes on with the next
request, and sends the answers in request order as they complete
(``broker.server``, ``broker.answers``). Only what is already in order may be
deferred: the appends happened in the handler, so the order of records in the
log is the order of the requests, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


class Deferred:
    """A handler's answer still to come: ``await finish()`` returns the response."""

    def __init__(self, finish: Callable[[], Awaitable[Any]]) -> None:
        self.finish = finish

    def map(self, fn: Callable[[Any], Any]) -> Deferred:
        """The same answer passed through ``fn`` once it is ready (a guard
        adding the partitions it refused, say)."""
        inner = self.finish

        async def finish() -> Any:
            return fn(await inner())

        return Deferred(finish)
