"""SaslHandshake / SaslAuthenticate outside an authentication, SCRAM
credential administration (DescribeUserScramCredentials,
AlterUserScramCredentials, KIP-554), and client quota administration
(DescribeClientQuotas, AlterClientQuotas, KIP-546; entity types user and
client-id, a null name being the default).

A connection authenticating on a SASL listener has its SASL requests taken by
the server (``broker.server`` with ``broker.security.sasl_session``) before handlers
run; what reaches these handlers came on a listener without SASL or after
authentication finished, and gets ILLEGAL_SASL_STATE, as from Kafka.

Credentials: the client sends the salt and the salted password; the broker
keeps the derived StoredKey and ServerKey (``broker.security.scram``). Checks
and error codes are Kafka's: an empty user name or a mechanism other than
SCRAM-SHA-256/512 (UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM),
iterations outside 4096..16384 (UNACCEPTABLE_CREDENTIAL), the same user both
upserted and deleted, or twice for one mechanism (DUPLICATE_RESOURCE),
deleting or describing what does not exist (RESOURCE_NOT_FOUND).
"""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from broker.context import BrokerContext, Session
from broker.security import quotas
from broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MIN_ITERATIONS,
    ScramCredential,
)
from protocol.api import RequestHeader
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

_IDS_BY_NAME = {name: i for i, name in MECHANISM_IDS.items()}


async def handle_sasl_handshake(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    ctx.metrics.error("SaslHandshake", ErrorCode.ILLEGAL_SASL_STATE)
    return SaslHandshakeResponse[header.api_version](
        error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


async def handle_sasl_authenticate(ctx: BrokerContext, header: RequestHeader,
                                   req: Any, session: Session) -> Any:
    ctx.metrics.error("SaslAuthenticate", ErrorCode.ILLEGAL_SASL_STATE)
    return SaslAuthenticateResponse[header.api_version](
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received outside a SASL authentication",
        auth_bytes=b"", session_lifetime_ms=0)


async def handle_describe_scram(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = DescribeUserScramCredentialsResponse[header.api_version]
    result_cls = resp.DescribeUserScramCredentialsResult
    info_cls = result_cls.CredentialInfo
    if ctx.credentials is None:
        return resp(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                    error_message="no credential store", results=[])
    users = await ctx.credentials.users()
    wanted = [u.name for u in req.users] if req.users else sorted(users)
    results = []
    seen: set[str] = set()
    for name in wanted:
        if name in seen:
            ctx.metrics.error("DescribeUserScramCredentials", ErrorCode.DUPLICATE_RESOURCE)
            results.append(result_cls(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                                      error_message=f"Cannot describe SCRAM credentials for "
                                                    f"the same user twice in a single "
                                                    f"request: {name}",
                                      credential_infos=[]))
            continue
        seen.add(name)
        found = users.get(name)
        if not found:
            ctx.metrics.error("DescribeUserScramCredentials", ErrorCode.RESOURCE_NOT_FOUND)
            results.append(result_cls(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                      error_message=f"Attempt to describe a user credential "
                                                    f"that does not exist: {name}",
                                      credential_infos=[]))
            continue
        results.append(result_cls(user=name, error_code=0, error_message=None,
                                  credential_infos=[info_cls(mechanism=_IDS_BY_NAME[m],
                                                             iterations=c.iterations)
                                                    for m, c in sorted(found.items())]))
    return resp(throttle_time_ms=0, error_code=0, error_message=None, results=results)


async def handle_alter_scram(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = AlterUserScramCredentialsResponse[header.api_version]
    result_cls = resp.AlterUserScramCredentialsResult
    if ctx.credentials is None:
        return resp(throttle_time_ms=0, results=[
            result_cls(user=u, error_code=ErrorCode.SECURITY_DISABLED,
                       error_message="no credential store")
            for u in sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})])
    errors: dict[str, tuple[ErrorCode, str]] = {}
    order: list[str] = []
    existing = await ctx.credentials.users()

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    touched: dict[str, set[int]] = {}
    for item, kind in ([(d, "delete") for d in req.deletions]
                       + [(u, "upsert") for u in req.upsertions]):
        user = item.name
        if user not in order:
            order.append(user)
        mechanism = MECHANISM_IDS.get(item.mechanism)
        if item.mechanism in touched.setdefault(user, set()):
            fail(user, ErrorCode.DUPLICATE_RESOURCE,
                 "A user credential cannot be altered twice in the same request")
        touched[user].add(item.mechanism)
        if not user:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                 f"Unknown SCRAM mechanism {item.mechanism}")
        elif kind == "delete" and mechanism not in existing.get(user, {}):
            fail(user, ErrorCode.RESOURCE_NOT_FOUND,
                 "Attempt to delete a user credential that does not exist")
        elif kind == "upsert" and not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                 f"Too {'few' if item.iterations < MIN_ITERATIONS else 'many'} iterations "
                 f"(must be {MIN_ITERATIONS} to {MAX_ITERATIONS})")
        elif kind == "upsert" and (not item.salt or not item.salted_password):
            fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password are needed")
    upserts = [(u.name, MECHANISM_IDS[u.mechanism],
                ScramCredential.from_salted_password(MECHANISM_IDS[u.mechanism], u.salt,
                                                     u.salted_password, u.iterations))
               for u in req.upsertions if u.name not in errors]
    deletions = [(d.name, MECHANISM_IDS[d.mechanism]) for d in req.deletions
                 if d.name not in errors]
    if upserts or deletions:
        await ctx.credentials.alter(upserts, deletions)
        log.info("SCRAM credentials altered",
                 upserted=sorted({f"{u}:{m}" for u, m, _ in upserts}),
                 deleted=sorted({f"{u}:{m}" for u, m in deletions}))
    results = []
    for user in order:
        code, message = errors.get(user, (ErrorCode.NONE, None))  # type: ignore[assignment]
        if code:
            ctx.metrics.error("AlterUserScramCredentials", code)
        results.append(result_cls(user=user, error_code=code, error_message=message))
    return resp(throttle_time_ms=0, results=results)


# -- client quotas (KIP-546) ---------------------------------------------------------

_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_ANY = 0, 1, 2


def _matches(ent: dict[str, str | None], components: Any, strict: bool) -> bool:
    for c in components:
        if c.entity_type not in ent:
            return False
        name = ent[c.entity_type]
        if c.match_type == _MATCH_EXACT and name != c.match:
            return False
        if c.match_type == _MATCH_DEFAULT and name is not None:
            return False
    return not strict or len(ent) == len(components)


async def handle_describe_client_quotas(ctx: BrokerContext, header: RequestHeader,
                                        req: Any, session: Session) -> Any:
    resp = DescribeClientQuotasResponse[header.api_version]
    entry_cls = resp.EntryData
    if ctx.quotas is None:
        return resp(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                    error_message="no quota store", entries=None)
    for c in req.components:
        if c.entity_type not in (quotas.USER, quotas.CLIENT) or c.match_type not in (0, 1, 2):
            ctx.metrics.error("DescribeClientQuotas", ErrorCode.INVALID_REQUEST)
            return resp(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                        error_message=f"unsupported entity type or match "
                                      f"{c.entity_type!r}/{c.match_type}", entries=None)
    entries = []
    for ent, values in sorted(ctx.quotas.quotas.entries.items(), key=lambda e: str(e[0])):
        if not _matches(dict(ent), req.components, req.strict):
            continue
        entries.append(entry_cls(
            entity=[entry_cls.EntityData(entity_type=t, entity_name=n) for t, n in ent],
            values=[entry_cls.ValueData(key=k, value=v) for k, v in sorted(values.items())]))
    return resp(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


async def handle_alter_client_quotas(ctx: BrokerContext, header: RequestHeader,
                                     req: Any, session: Session) -> Any:
    resp = AlterClientQuotasResponse[header.api_version]
    entry_cls = resp.EntryData
    results = []
    changes: dict[quotas.Entity, dict[str, float | None]] = {}
    for e in req.entries:
        ent_items = [(d.entity_type, d.entity_name) for d in e.entity]
        code, message = ErrorCode.NONE, None
        types = [t for t, _ in ent_items]
        if ctx.quotas is None:
            code, message = ErrorCode.SECURITY_DISABLED, "no quota store"
        elif not types or len(set(types)) != len(types) or not set(types) <= {quotas.USER,
                                                                               quotas.CLIENT}:
            code, message = ErrorCode.INVALID_REQUEST, (
                f"entity types must be user and/or client-id, each once: {types}")
        else:
            for op in e.ops:
                if op.key not in quotas.KEYS:
                    code, message = ErrorCode.INVALID_REQUEST, f"Unknown quota key {op.key!r}"
                elif not op.remove and not op.value > 0:
                    code, message = ErrorCode.INVALID_REQUEST, (
                        f"quota {op.key} must be positive, got {op.value}")
        if code:
            ctx.metrics.error("AlterClientQuotas", code)
        elif not req.validate_only:
            ent = tuple(sorted(ent_items))
            for op in e.ops:
                changes.setdefault(ent, {})[op.key] = None if op.remove else float(op.value)
        results.append(entry_cls(error_code=code, error_message=message, entity=[
            entry_cls.EntityData(entity_type=t, entity_name=n) for t, n in ent_items]))
    if changes and ctx.quotas is not None:
        await ctx.quotas.alter(changes)
        log.info("client quotas altered", changes={str(k): v for k, v in changes.items()})
    return resp(throttle_time_ms=0, entries=results)


HANDLERS = {
    DescribeClientQuotasRequest.API_KEY: handle_describe_client_quotas,
    AlterClientQuotasRequest.API_KEY: handle_alter_client_quotas,
    SaslHandshakeRequest.API_KEY: handle_sasl_handshake,
    SaslAuthenticateRequest.API_KEY: handle_sasl_authenticate,
    DescribeUserScramCredentialsRequest.API_KEY: handle_describe_scram,
    AlterUserScramCredentialsRequest.API_KEY: handle_alter_scram,
}
