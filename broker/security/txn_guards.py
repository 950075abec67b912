"""Guards of the transaction tooling APIs (KIP-664), as Kafka authorizes them:

- DescribeProducers: READ on each topic, else TOPIC_AUTHORIZATION_FAILED for
  its partitions;
- DescribeTransactions: DESCRIBE on each transactional id, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it; the partitions of topics the
  principal may not DESCRIBE are left out of the answer;
- ListTransactions: only the ids the principal may DESCRIBE, silently;
- WriteTxnMarkers (another broker's coordinator, or an operator's
  ``Admin.abortTransaction``): ALTER on the cluster, else CLUSTER_ACTION.

See ``broker.security.guards`` for the whole picture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.security.access import Access, item_class, response_class
from broker.security.acl import CLUSTER_NAME
from broker.security.acl import Operation as Op
from broker.security.acl import ResourceType as R
from broker.security.topic_guards import _partitions, _split
from protocol.api import RequestHeader
from protocol.errors import ErrorCode

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

Handler = Callable[..., Any]


async def describe_producers(access: Access, header: RequestHeader, req: Any,
                             handler: Handler) -> Any:
    return await _split(
        access, header, req, handler, field="topics", answer_field="topics",
        allowed=lambda t: access.allows(Op.READ, R.TOPIC, t.name),
        denied=lambda resp, t: item_class(resp, "topics")(
            name=t.name, partitions=_partitions(resp, ("topics", "partitions"),
                                                t.partition_indexes, TOPIC_DENIED,
                                                error_message=TOPIC_DENIED.name,
                                                active_producers=[])))


async def describe_transactions(access: Access, header: RequestHeader, req: Any,
                                handler: Handler) -> Any:
    resp = response_class(header)
    ids = list(req.transactional_ids)
    allowed = [i for i in ids if access.allows(Op.DESCRIBE, R.TRANSACTIONAL_ID, i)]
    req.transactional_ids = allowed
    response = (await handler(access.ctx, header, req, access.session) if allowed
                else resp(throttle_time_ms=0, transaction_states=[]))
    for state in response.transaction_states:
        state.topics = [t for t in state.topics
                        if access.allows(Op.DESCRIBE, R.TOPIC, t.topic, quiet=True)]
    denied = item_class(resp, "transaction_states")
    response.transaction_states.extend(
        denied(error_code=TXN_DENIED, transactional_id=i, transaction_state="",
               transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
               producer_epoch=-1, topics=[])
        for i in ids if i not in allowed)
    return response


async def list_transactions(access: Access, header: RequestHeader, req: Any,
                            handler: Handler) -> Any:
    response = await handler(access.ctx, header, req, access.session)
    response.transaction_states = [
        t for t in response.transaction_states
        if access.allows(Op.DESCRIBE, R.TRANSACTIONAL_ID, t.transactional_id, quiet=True)]
    return response


async def write_txn_markers(access: Access, header: RequestHeader, req: Any,
                            handler: Handler) -> Any:
    if (access.authorizer.authorize(access.principal, access.host, Op.ALTER, R.CLUSTER,
                                    CLUSTER_NAME)
            or access.allows(Op.CLUSTER_ACTION, R.CLUSTER, CLUSTER_NAME)):
        return await handler(access.ctx, header, req, access.session)
    return _markers_denied(header, req)


def _markers_denied(header: RequestHeader, req: Any) -> Any:
    resp = response_class(header)
    marker = item_class(resp, "markers")
    topic = item_class(marker, "topics")
    part = item_class(topic, "partitions")
    return resp(markers=[marker(producer_id=m.producer_id, topics=[topic(
        name=t.name, partitions=[part(partition_index=p, error_code=CLUSTER_DENIED)
                                 for p in t.partition_indexes]) for t in m.topics])
        for m in req.markers])


GUARDS = {
    27: write_txn_markers,
    61: describe_producers,
    65: describe_transactions,
    66: list_transactions,
}
