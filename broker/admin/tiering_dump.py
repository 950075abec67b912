"""``tierd admin tiering dump-metadata``: the ``__remote_log_metadata`` topic,
record by record, decoded (what KIP-1057's formatter gives Kafka's console
consumer).

Every record of every partition of the topic, up to the end offsets at the
start, in offset order per partition, one JSON object a line:
``{"partition", "offset", "timestamp", "event": {"type", ...fields}}``;
``--topic`` keeps the events of those user topics, ``--partition`` reads
only those metadata partitions. A record the brokers cannot decode is
printed with an ``error`` instead of an ``event`` (and counted: exit 1), so
a damaged topic can be looked at too.
"""

from __future__ import annotations

import json
from typing import Any

from broker.admin.common import EXIT_FAILED, EXIT_OK, fail
from broker.admin.remote_store import progress, read_metadata_records
from storage.remote.rlmm_serde import MetadataRecordError, describe, deserialize


def register(tsub: Any) -> None:
    dump = tsub.add_parser(
        "dump-metadata", help="print __remote_log_metadata decoded, one JSON object a record")
    dump.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                      help="only events of this user topic (repeatable)")
    dump.add_argument("--partition", action="append", type=int, default=None,
                      metavar="N", help="only this partition of the metadata topic (repeatable)")
    dump.set_defaults(func=run)


def record_line(partition: int, record: Any, topics: set[str]) -> dict[str, Any] | None:
    """The line printed for one record, or None if ``topics`` filters it out."""
    line: dict[str, Any] = {"partition": partition, "offset": record.offset,
                            "timestamp": record.timestamp}
    try:
        event = deserialize(record.value or b"")
    except MetadataRecordError as exc:
        return {**line, "error": str(exc)}
    if topics and event.topic_id_partition.topic not in topics:
        return None
    return {**line, "event": describe(event)}


def run(args: Any) -> int:
    topics = set(args.topic)
    undecodable = 0

    def sink(partition: int, record: Any) -> None:
        nonlocal undecodable
        line = record_line(partition, record, topics)
        if line is None:
            return
        undecodable += "error" in line
        print(json.dumps(line, sort_keys=False), flush=False)

    with progress() as bar:
        read_metadata_records(args, bar, lambda partitions, begins: None, sink,
                              only=args.partition)
    if undecodable:
        return fail(f"{undecodable} records could not be decoded", EXIT_FAILED)
    return EXIT_OK
