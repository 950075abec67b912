"""A connection's answers, sent in request order.

Theory of operation: the server handles a connection's pipelined requests one
at a time; each gives encoded parts (bytes, or file slices sent with
sendfile), nothing (acks=0), or a ``Later``: an answer still to come (an
acks=all produce waiting for its ISR, see ``broker.deferred``) while the
requests after it are handled. ``send_answers`` sends what is ready before a
``Later`` first, then that one once it is ready, and so on.

Error handling: a file slice shorter than promised (the segment was cut
under it) closes the connection (``broker.closing.reject``); an answer still
to come that fails closes the parts after it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from broker import zero_copy
from broker.closing import reject
from broker.metrics import BrokerMetrics
from storage.log.file_slice import ShortFileSlice


class Later:
    """An answer still to come in a connection's queue of answers (see
    ``broker.deferred``): ``await finish()`` gives its encoded parts."""

    __slots__ = ("finish",)

    def __init__(self, finish: Callable[[], Awaitable[bytes | list[zero_copy.Part] | None]]
                 ) -> None:
        self.finish = finish


# What handling one request gives the connection to send.
Answer = bytes | list[zero_copy.Part] | Later | None


async def send_answers(stream: trio.abc.Stream, out: list[zero_copy.Part | Later],
                       metrics: BrokerMetrics, peer: str) -> None:
    """Send ``out`` to ``stream`` in order (see the theory of operation).

    Raises:
        CloseConnection: a file slice came out short.
    """
    ready: list[zero_copy.Part] = []
    for i, item in enumerate(out):
        if not isinstance(item, Later):
            ready.append(item)
            continue
        if ready:
            await _send_parts(stream, ready, metrics, peer)
            ready = []
        try:
            answer = await item.finish()
        except BaseException:
            zero_copy.close_parts(out[i + 1:])
            raise
        if isinstance(answer, list):
            ready.extend(answer)
        elif answer is not None:
            ready.append(answer)
    if ready:
        await _send_parts(stream, ready, metrics, peer)


async def _send_parts(stream: trio.abc.Stream, parts: list[zero_copy.Part],
                      metrics: BrokerMetrics, peer: str) -> None:
    try:
        sent = await zero_copy.send_parts(stream, parts)
    except ShortFileSlice as exc:
        reject(metrics, peer, "short_file_slice", str(exc))
    if sent.sendfile_bytes:
        metrics.sendfile_bytes.inc(sent.sendfile_bytes)
    if sent.warmed_bytes:
        metrics.fetch_warmed_bytes.inc(sent.warmed_bytes)
