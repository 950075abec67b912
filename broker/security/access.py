"""One request's view of the authorizer, and helpers that build the
"not authorized" parts of responses.

An ``Access`` binds the authorizer to a request's session (principal, host); a
guard (``broker.security.guards``) asks it, and every denial is counted in
``tierd_authorization_denied_total{operation,resource_type}`` and, unless
the guard only filters a listing, logged with who asked for what (Kafka's
authorizer log).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from broker.context import BrokerContext, Session
from broker.security.acl import Authorizer, Operation, ResourceType
from protocol import api
from protocol.api import RequestHeader

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Access:
    ctx: BrokerContext
    authorizer: Authorizer
    session: Session
    api: str

    @classmethod
    def of(cls, ctx: BrokerContext, authorizer: Authorizer, header: RequestHeader,
           session: Session) -> Access:
        """The access of ``session`` for the request ``header`` names."""
        return cls(ctx, authorizer, session, api.SUPPORTED[header.api_key].name)

    @property
    def principal(self) -> str:
        return self.session.principal

    @property
    def host(self) -> str:
        return self.session.host

    def allows(self, op: Operation, rtype: ResourceType, name: str, *, quiet: bool = False
               ) -> bool:
        """Whether the principal may; a denial is counted (and logged unless quiet)."""
        if self.authorizer.authorize(self.principal, self.host, op, rtype, name):
            return True
        self.ctx.metrics.authorization_denied.labels(op.name, rtype.name).inc()
        if not quiet:
            log.info("request not authorized", principal=self.principal, host=self.host,
                     api=self.api, operation=op.name, resource_type=rtype.name, resource=name)
        return False

    def allows_any(self, op: Operation, rtype: ResourceType) -> bool:
        """Whether the principal may on at least one resource of the type."""
        if self.authorizer.authorize_any(self.principal, self.host, op, rtype):
            return True
        self.ctx.metrics.authorization_denied.labels(op.name, rtype.name).inc()
        log.info("request not authorized", principal=self.principal, host=self.host,
                 api=self.api, operation=op.name, resource_type=rtype.name, resource="*")
        return False

    def operations(self, rtype: ResourceType, name: str) -> frozenset[int]:
        """The allowed operations (the protocol's authorized_operations)."""
        return self.authorizer.authorized_operations(self.principal, self.host, rtype, name)


class Lenient:
    """A message class that ignores values for fields its version lacks (a
    refusal is built the same way for every version of an API)."""

    __slots__ = ("cls",)

    def __init__(self, cls: Any) -> None:
        self.cls = cls

    @property
    def fields(self) -> dict[str, Any]:
        return self.cls.fields  # type: ignore[no-any-return]

    def __call__(self, **values: Any) -> Any:
        fields = self.cls.fields
        return self.cls(**{k: v for k, v in values.items() if k in fields})


def item_class(cls: Any, *path: str) -> Lenient:
    """The data class of a (nested) struct field of a message class."""
    if isinstance(cls, Lenient):
        cls = cls.cls
    for name in path:
        cls = cls.fields[name].data_class
    return Lenient(cls)


def response_class(header: RequestHeader) -> Lenient:
    return Lenient(api.SUPPORTED[header.api_key].response[header.api_version])


def body_of(response: Any) -> Any:
    """A response's message (a Fetch answer may be wrapped for sendfile)."""
    return response.response if isinstance(response, api.WrappedResponse) else response
