"""DescribeTopicPartitions (KIP-966): the handler without an authorizer;
the paging itself is ``broker.topic_partitions_page``'s, and with an
authorizer the guard (``broker.security.topic_guards``) calls it with the
principal's view of the topics."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeTopicPartitionsRequest

from broker.context import BrokerContext, Session
from broker.security.acl import OPERATIONS, ResourceType
from broker.topic_partitions_page import describe_page, operations_bitfield
from protocol.api import RequestHeader

# Without an authorizer every operation on a topic is allowed (Kafka reports them all).
ALL_TOPIC_OPERATIONS = operations_bitfield({op.value for op in OPERATIONS[ResourceType.TOPIC]})


async def handle_describe_topic_partitions(ctx: BrokerContext, header: RequestHeader, req: Any,
                                           session: Session) -> Any:
    return describe_page(ctx.metadata, req, session.listener,
                         ctx.config["max.request.partition.size.limit"],
                         lambda _name: True, lambda _name: ALL_TOPIC_OPERATIONS)


HANDLERS = {DescribeTopicPartitionsRequest.API_KEY: handle_describe_topic_partitions}
