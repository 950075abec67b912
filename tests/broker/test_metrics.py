"""BrokerMetrics' per-partition log sizes: read on the event loop, served from a copy."""

from __future__ import annotations

import trio
import trio.testing

from broker.metrics import BrokerMetrics


def test_log_sizes_are_served_from_the_event_loop_snapshot() -> None:
    sizes = {("t", 0): 100}
    calls = []

    def read() -> list[tuple[str, int, int]]:
        calls.append(1)
        return [(t, p, size) for (t, p), size in sizes.items()]

    metrics = BrokerMetrics()
    metrics.add_log_sizes(read)
    value = metrics.registry.get_sample_value
    assert value("tierd_log_size_bytes", {"topic": "t", "partition": "0"}) == 100
    read_by_setup = len(calls)
    sizes[("t", 0)] = 250
    sizes[("t", 1)] = 7
    # A scrape (in the HTTP thread) does not walk the partitions: the old copy.
    assert value("tierd_log_size_bytes", {"topic": "t", "partition": "0"}) == 100
    assert len(calls) == read_by_setup

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(metrics.run_log_sizes, 1.0)
            await trio.sleep(1.5)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert value("tierd_log_size_bytes", {"topic": "t", "partition": "0"}) == 250
    assert value("tierd_log_size_bytes", {"topic": "t", "partition": "1"}) == 7
