"""What an EndTxn request does to a transactional id: Kafka's
handleEndTransaction checks, as a pure function of the id's metadata.

Transactions v1 (EndTxn v0-v4): the producer must hold the id's current
epoch; an Ongoing transaction is prepared (epoch unchanged); a retry after
it completed (same result) is answered NONE.

Transactions v2 (EndTxn v5, KIP-890 part 2): the Prepare* is written under
the next epoch, which the response hands back to the client. So, once a
v2 client ended a transaction, the epoch it sent is one below the id's:
the same EndTxn again is a retry (CONCURRENT_TRANSACTIONS
while the markers are written, NONE with the new epoch once complete),
whereas any other old epoch is fenced. An abort at the current epoch of an
id with nothing open (Empty/Complete*) still bumps the epoch: the client
started a transaction whose partitions never reached the coordinator, and
whatever it sent late must be fenced.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from broker.transactions.state import PREPARED, TxnMetadata, TxnState
from protocol.errors import ErrorCode

S = TxnState
E = ErrorCode
# States in which a v2 client's retried EndTxn (at the epoch before the bump) is recognised.
_ENDED = PREPARED | {S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


class EndAction(enum.Enum):
    ANSWER = "answer"  # answer ``error`` (NONE: with the id's current producer id and epoch)
    PREPARE = "prepare"  # write PrepareCommit / PrepareAbort, then the markers


@dataclass(frozen=True, slots=True)
class EndDecision:
    action: EndAction
    error: ErrorCode = E.NONE
    # PREPARE: write the Prepare* under the next epoch (transactions v2).
    bump_epoch: bool = False


def _answer(error: ErrorCode) -> EndDecision:
    return EndDecision(EndAction.ANSWER, error)


def is_v2_retry(txn: TxnMetadata, epoch: int) -> bool:
    """Is ``epoch`` the one a v2 EndTxn bumped away from (a retried EndTxn)?
    (Kafka's endTxnEpochBumped: the id's client uses transactions v2, which
    the log keeps, and the epoch is one below the id's.)"""
    return txn.client_tv2 and epoch + 1 == txn.producer_epoch


def decide(txn: TxnMetadata, producer_id: int, epoch: int, committed: bool,
           tv2: bool) -> EndDecision:
    """The outcome of EndTxn(``committed``) from (``producer_id``, ``epoch``).

    Args:
        tv2: the request is EndTxn v5+ (the client uses transactions v2).
    """
    if txn.producer_id != producer_id:
        return _answer(E.INVALID_PRODUCER_ID_MAPPING)
    retry = is_v2_retry(txn, epoch)
    done, prepared = ((S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if committed
                      else (S.COMPLETE_ABORT, S.PREPARE_ABORT))
    if epoch != txn.producer_epoch and not (retry and txn.state in _ENDED):
        return _answer(E.PRODUCER_FENCED)
    if txn.state is S.ONGOING:
        return EndDecision(EndAction.PREPARE, bump_epoch=tv2)
    if txn.state is prepared:
        return _answer(E.CONCURRENT_TRANSACTIONS)
    if txn.state is done and (retry or not txn.client_tv2):
        return _answer(E.NONE)
    if tv2 and not committed and txn.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) \
            and not retry:
        return EndDecision(EndAction.PREPARE, bump_epoch=True)
    return _answer(E.INVALID_TXN_STATE)
