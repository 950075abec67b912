"""Request handlers, one module per Kafka API family.

A handler is ``async (ctx, header, request, session) -> response | None``;
None means no response is sent (Produce with acks=0). ``session`` is the
connection's (listener, principal, client address), passed explicitly: no
handler reads it from anywhere else. Errors caused by the request are
answered as Kafka error codes inside the response; exceptions escaping a
handler are our bugs (the connection is closed and the traceback logged).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.context import BrokerContext, Session
from broker.handlers import (
    acls,
    admin_configs,
    admin_topics,
    api_versions,
    cluster,
    consumer_groups,
    elect_leaders,
    features,
    fetch,
    groups,
    init_producer_id,
    inter_broker,
    leader_epoch,
    list_offsets,
    metadata,
    offsets,
    produce,
    reassignments,
    security,
    telemetry,
    tiering,
    topic_partitions,
    transactions,
    txn_admin,
)
from protocol.api import RequestHeader

Handler = Callable[[BrokerContext, RequestHeader, Any, Session], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {}
for _module in (api_versions, metadata, produce, fetch, list_offsets, leader_epoch,
                admin_topics, admin_configs, cluster, init_producer_id, groups,
                consumer_groups, offsets,
                transactions, txn_admin, inter_broker, reassignments, tiering, security, acls,
                topic_partitions, elect_leaders, telemetry, features):
    HANDLERS.update(_module.HANDLERS)
