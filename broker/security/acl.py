"""ACLs and the authorizer that decides with them (Kafka's AclAuthorizer).

Theory of operation: an ACL says that a principal, from a host, may (ALLOW)
or may not (DENY) perform an operation on a resource pattern. A pattern is a
resource type and a name, matched LITERAL (the name, or ``*`` for every
resource of the type) or PREFIXED (every name starting with it). A request is
decided as Kafka decides it:

1. a super user (``super.users``) is allowed everything;
2. with no ACL at all on the resource, ``allow.everyone.if.no.acl.found``
   decides;
3. a matching DENY wins over any ALLOW;
4. otherwise a matching ALLOW allows. ALL matches every operation; READ,
   WRITE, DELETE and ALTER each imply DESCRIBE, and ALTER_CONFIGS implies
   DESCRIBE_CONFIGS.

A principal matches itself or ``User:*``; a host matches itself or ``*``.

The codes are the protocol's (``AclOperation``, ``AclPermissionType``,
``ResourceType``, ``PatternType`` of Kafka's clients), so requests and
responses carry them unchanged.

Concurrency: the ACL table is replaced whole (``set_acls``), never edited in
place, so a decision always sees one consistent table.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The one cluster resource's name, as Kafka names it.
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"

# An ALLOW of the key operation also allows these (Kafka's implied operations).
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}

# The operations each resource type has (what AclOperation bit sets report
# and what an ACL may name).
OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DELETE, Operation.DESCRIBE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE,
                           Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE),
    ResourceType.TRANSACTIONAL_ID: (Operation.WRITE, Operation.DESCRIBE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}

# Kafka's names, for ZooKeeper nodes and log lines.
RESOURCE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group",
                  ResourceType.CLUSTER: "Cluster",
                  ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                  ResourceType.DELEGATION_TOKEN: "DelegationToken",
                  ResourceType.USER: "User"}
OPERATION_NAMES = {op: "".join(w.capitalize() for w in op.name.split("_"))
                   for op in Operation if op > Operation.ANY}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}


class InvalidAcl(ValueError):
    """An ACL or filter that cannot be stored or used (INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} from {self.host} "
                f"{self.operation.name} on {self.resource_type.name}:{self.pattern.name}:"
                f"{self.name}")

    def validate(self) -> None:
        """Raises InvalidAcl unless this is a storable ACL (no ANY, MATCH, UNKNOWN)."""
        if self.resource_type not in OPERATIONS:
            raise InvalidAcl(f"invalid resource type {self.resource_type.name}")
        if self.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"invalid pattern type {self.pattern.name}")
        if not self.name:
            raise InvalidAcl("empty resource name")
        if self.pattern is PatternType.PREFIXED and self.name == WILDCARD:
            raise InvalidAcl("a prefixed pattern cannot be '*'")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAcl(f"the cluster resource is named {CLUSTER_NAME!r}")
        if self.operation is not Operation.ALL \
                and self.operation not in OPERATIONS[self.resource_type]:
            raise InvalidAcl(f"operation {self.operation.name} does not apply to "
                             f"{self.resource_type.name}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAcl(f"invalid permission type {self.permission.name}")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAcl(f"principal {self.principal!r} is not of the form Type:name")
        if not self.host:
            raise InvalidAcl("empty host")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select: None matches anything; ANY
    types match every value; pattern MATCH selects the ACLs that would apply
    to the named resource (literal, wildcard and prefixes)."""

    resource_type: ResourceType
    name: str | None
    pattern: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        for value, what in ((self.resource_type, "resource type"), (self.pattern, "pattern type"),
                            (self.operation, "operation"), (self.permission, "permission type")):
            if value == 0:
                raise InvalidAcl(f"filter with an UNKNOWN {what}")

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY \
                and acl.resource_type is not self.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        return ((self.principal is None or acl.principal == self.principal)
                and (self.host is None or acl.host == self.host)
                and (self.operation is Operation.ANY or acl.operation is self.operation)
                and (self.permission is Permission.ANY or acl.permission is self.permission))

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.pattern is PatternType.MATCH:
            if self.name is None:
                return True
            if acl.pattern is PatternType.LITERAL:
                return acl.name in (self.name, WILDCARD)
            return self.name.startswith(acl.name)
        if self.pattern is not PatternType.ANY and acl.pattern is not self.pattern:
            return False
        return self.name is None or acl.name == self.name


def _principal_matches(acl: AclBinding, principal: str) -> bool:
    return acl.principal == principal or acl.principal == "User:*"


class Authorizer:
    """Decides requests with the current ACL table (see the module docstring).

    Args:
        super_users: principals allowed everything (``super.users``).
        allow_if_no_acl: ``allow.everyone.if.no.acl.found``.
    """

    def __init__(self, super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: tuple[AclBinding, ...] = ()
        # resource type -> literal name -> ACLs; resource type -> prefixed ACLs
        self._literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}

    def set_acls(self, acls: Iterable[AclBinding]) -> None:
        """Replace the whole table."""
        table = tuple(sorted(set(acls), key=_sort_key))
        literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        prefixed: dict[ResourceType, list[AclBinding]] = {}
        for acl in table:
            if acl.pattern is PatternType.LITERAL:
                literal.setdefault(acl.resource_type, {}).setdefault(acl.name, []).append(acl)
            else:
                prefixed.setdefault(acl.resource_type, []).append(acl)
        self.acls, self._literal, self._prefixed = table, literal, prefixed

    def applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL whose pattern covers the resource."""
        by_name = self._literal.get(resource_type, {})
        found = list(by_name.get(name, ()))
        if name != WILDCARD:
            found.extend(by_name.get(WILDCARD, ()))
        found.extend(a for a in self._prefixed.get(resource_type, ()) if name.startswith(a.name))
        return found

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.applicable(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        mine = [a for a in acls if _principal_matches(a, principal)
                and a.host in (host, WILDCARD)]
        if any(a.permission is Permission.DENY
               and a.operation in (operation, Operation.ALL) for a in mine):
            return False
        allowing = {operation, Operation.ALL} | _IMPLIED_BY.get(operation, frozenset())
        return any(a.permission is Permission.ALLOW and a.operation in allowing for a in mine)

    def authorize_any(self, principal: str, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether the principal may perform the operation on at least one
        resource of the type (KIP-679: idempotent producers need WRITE on
        some topic). A DENY on a pattern does not take away an ALLOW on a
        resource the pattern does not cover, so any ALLOW not itself denied
        counts; with no ACL of the type, ``allow.everyone.if.no.acl.found``.
        """
        if principal in self.super_users:
            return True
        acls = [a for a in self.acls if a.resource_type is resource_type]
        if not acls:
            return self.allow_if_no_acl
        for acl in acls:
            if acl.permission is Permission.ALLOW and _principal_matches(acl, principal) \
                    and acl.host in (host, WILDCARD) \
                    and acl.operation in (operation, Operation.ALL) \
                    and (acl.pattern is PatternType.PREFIXED
                         or self.authorize(principal, host, operation, resource_type,
                                           acl.name)):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> frozenset[int]:
        """The operations allowed on a resource (the protocol's authorized_operations)."""
        return frozenset(op.value for op in OPERATIONS.get(resource_type, ())
                         if self.authorize(principal, host, op, resource_type, name))


def _sort_key(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (acl.resource_type, acl.name, acl.pattern, acl.principal, acl.host, acl.operation,
            acl.permission)


def parse_super_users(text: str | None) -> list[str]:
    """``super.users``: principals separated by semicolons."""
    return [p.strip() for p in (text or "").split(";") if p.strip()]
