"""WriteTxnMarkers, in process: append COMMIT/ABORT markers to a transaction's partitions.

Kafka's coordinator sends WriteTxnMarkers requests to each partition's
leader; on one broker every leader is local, so the markers go straight to
the given append function (``ReplicaManager.append_local``) as coordinator
appends (no sequence checks, control batches allowed). The log closes the producer's transaction on each
partition, indexes aborts in ``.txnindex`` and moves the last stable offset.

Error handling, as Kafka's TransactionMarkerRequestCompletionHandler: a
partition that no longer exists is dropped (its topic was deleted); a marker
the log rejects for a newer producer epoch or coordinator epoch is dropped
too (a later marker already closed that transaction); any other failure is
returned so the coordinator retries it later.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.transactions.state import TopicPartition, TxnMetadata
from protocol import control
from protocol.errors import ErrorCode, KafkaApiError
from storage.log.log import AppendResult
from storage.log.producer_state import AppendOrigin

log = structlog.get_logger(__name__)

# Marker append errors after which retrying cannot help.
_DROP = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH,
                   ErrorCode.TRANSACTION_COORDINATOR_FENCED})


AppendMarker = Callable[[TopicPartition, bytearray, AppendOrigin], AppendResult]


def write_markers(append: AppendMarker, txn: TxnMetadata, committed: bool,
                  coordinator_epoch: int, now_ms: int) -> frozenset[TopicPartition]:
    """Append the marker to each partition of ``txn``.

    Returns:
        The partitions whose marker must be retried (empty when all landed).
    """
    retry = set()
    for tp in sorted(txn.partitions):
        batch = control.marker_batch(txn.producer_id, txn.producer_epoch, committed,
                                     coordinator_epoch, now_ms)
        try:
            append(tp, bytearray(batch), AppendOrigin.COORDINATOR)
        except KafkaApiError as exc:
            dropped = exc.code in _DROP
            log.warning("transaction marker not written", transactional_id=txn.transactional_id,
                        topic=tp[0], partition=tp[1], error=exc.code.name,
                        detail=exc.message, retry=not dropped)
            if not dropped:
                retry.add(tp)
    return frozenset(retry)
