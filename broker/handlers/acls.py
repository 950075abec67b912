"""CreateAcls, DescribeAcls and DeleteAcls (what ``kafka-acls`` and the admin
clients' createAcls / describeAcls / deleteAcls send).

Without an authorizer (``authorizer.class.name`` unset) each answers
SECURITY_DISABLED, as Kafka does. An ACL or filter that cannot be used (an
UNKNOWN or ANY where a value is needed, an operation the resource type does
not have, a principal not of the form ``Type:name``) is answered
INVALID_REQUEST with the reason; the others in the request still apply.
Who may call them is the guard's business (ALTER / DESCRIBE on the
cluster, ``broker.security.guards``).
"""

from __future__ import annotations

from typing import Any

import structlog
from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from broker.context import BrokerContext, Session
from broker.security.acl import (
    AclBinding,
    AclFilter,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from protocol.api import RequestHeader
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

DISABLED = ErrorCode.SECURITY_DISABLED
_DISABLED_MESSAGE = "no authorizer is configured on the broker (authorizer.class.name)"


def _enum(cls: Any, value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # UNKNOWN: refused by validate()


def _binding(c: Any) -> AclBinding:
    return AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                      _enum(PatternType, getattr(c, "resource_pattern_type", 3)), c.principal,
                      c.host, _enum(Operation, c.operation), _enum(Permission, c.permission_type))


def _filter(f: Any) -> AclFilter:
    return AclFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                     _enum(PatternType, getattr(f, "pattern_type_filter", 3)), f.principal_filter,
                     f.host_filter, _enum(Operation, f.operation),
                     _enum(Permission, f.permission_type))


async def handle_create_acls(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = CreateAclsResponse[header.api_version]
    result = resp.AclCreationResult
    if ctx.acls is None:
        return resp(throttle_time_ms=0, results=[
            result(error_code=DISABLED, error_message=_DISABLED_MESSAGE) for _ in req.creations])
    results: list[Any] = []
    valid: list[AclBinding] = []
    for creation in req.creations:
        acl = _binding(creation)
        try:
            acl.validate()
        except InvalidAcl as exc:
            ctx.metrics.error("CreateAcls", ErrorCode.INVALID_REQUEST)
            results.append(result(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc)))
            continue
        valid.append(acl)
        results.append(result(error_code=0, error_message=None))
    if valid:
        try:
            await ctx.acls.create(valid)
        except Exception as exc:  # the store (ZooKeeper) failed: nothing is known created
            log.warning("cannot store ACLs", error=repr(exc))
            ctx.metrics.error("CreateAcls", ErrorCode.UNKNOWN_SERVER_ERROR)
            return resp(throttle_time_ms=0, results=[
                result(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message="cannot store ACLs")
                if r.error_code == 0 else r for r in results])
        log.info("ACLs created", by=session.principal, acls=[str(a) for a in valid])
    return resp(throttle_time_ms=0, results=results)


async def handle_describe_acls(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = DescribeAclsResponse[header.api_version]
    if ctx.acls is None:
        return resp(throttle_time_ms=0, error_code=DISABLED, error_message=_DISABLED_MESSAGE,
                    resources=[])
    flt = _filter(req)
    try:
        flt.validate()
    except InvalidAcl as exc:
        ctx.metrics.error("DescribeAcls", ErrorCode.INVALID_REQUEST)
        return resp(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                    error_message=str(exc), resources=[])
    by_resource: dict[tuple[int, str, int], list[Any]] = {}
    res_cls = resp.DescribeAclsResource
    for acl in ctx.acls.authorizer.acls:
        if flt.matches(acl):
            by_resource.setdefault((acl.resource_type, acl.name, acl.pattern), []).append(
                res_cls.AclDescription(principal=acl.principal, host=acl.host,
                                       operation=acl.operation,
                                       permission_type=acl.permission))
    return resp(throttle_time_ms=0, error_code=0, error_message=None, resources=[
        res_cls(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in by_resource.items()])


async def handle_delete_acls(ctx: BrokerContext, header: RequestHeader, req: Any, session: Session) -> Any:
    resp = DeleteAclsResponse[header.api_version]
    result = resp.DeleteAclsFilterResult
    matching = result.DeleteAclsMatchingAcl
    if ctx.acls is None:
        return resp(throttle_time_ms=0, filter_results=[
            result(error_code=DISABLED, error_message=_DISABLED_MESSAGE, matching_acls=[])
            for _ in req.filters])
    filters: list[AclFilter] = []
    invalid: dict[int, str] = {}
    for i, f in enumerate(req.filters):
        flt = _filter(f)
        try:
            flt.validate()
        except InvalidAcl as exc:
            invalid[i] = str(exc)
        filters.append(flt)
    usable = [f for i, f in enumerate(filters) if i not in invalid]
    try:
        deleted = iter(await ctx.acls.delete(usable))
    except Exception as exc:  # the store (ZooKeeper) failed
        log.warning("cannot delete ACLs", error=repr(exc))
        return resp(throttle_time_ms=0, filter_results=[
            result(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message="cannot delete ACLs",
                   matching_acls=[]) for _ in req.filters])
    results = []
    for i in range(len(filters)):
        if i in invalid:
            ctx.metrics.error("DeleteAcls", ErrorCode.INVALID_REQUEST)
            results.append(result(error_code=ErrorCode.INVALID_REQUEST,
                                  error_message=invalid[i], matching_acls=[]))
            continue
        gone = next(deleted)
        if gone:
            log.info("ACLs deleted", by=session.principal, acls=[str(a) for a in gone])
        results.append(result(error_code=0, error_message=None, matching_acls=[matching(
            error_code=0, error_message=None, resource_type=a.resource_type,
            resource_name=a.name, pattern_type=a.pattern, principal=a.principal, host=a.host,
            operation=a.operation, permission_type=a.permission) for a in gone]))
    return resp(throttle_time_ms=0, filter_results=results)


HANDLERS = {
    CreateAclsRequest.API_KEY: handle_create_acls,
    DescribeAclsRequest.API_KEY: handle_describe_acls,
    DeleteAclsRequest.API_KEY: handle_delete_acls,
}
