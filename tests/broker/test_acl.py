"""The ACL authorizer's decisions (Kafka's AclAuthorizer rules), filters,
validation, the file store, and that every API has a guard."""

from __future__ import annotations

import pytest
import trio

from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Authorizer,
    InvalidAcl,
    parse_super_users,
)
from broker.security.acl import Operation as Op
from broker.security.acl import PatternType as P
from broker.security.acl import Permission as Perm
from broker.security.acl import ResourceType as R
from broker.security.acl_store import LocalAclStore
from broker.security.guards import GUARDS
from protocol import api

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str, op: Op, perm: Perm = Perm.ALLOW, *, rtype: R = R.TOPIC,
        pattern: P = P.LITERAL, principal: str = ALICE, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, supers: str = "", allow_if_none: bool = False) -> Authorizer:
    a = Authorizer(parse_super_users(supers), allow_if_none)
    a.set_acls(acls)
    return a


def allowed(a: Authorizer, op: Op, name: str, principal: str = ALICE, host: str = HOST,
            rtype: R = R.TOPIC) -> bool:
    return a.authorize(principal, host, op, rtype, name)


def test_no_acl_follows_allow_everyone_if_no_acl_found() -> None:
    assert not allowed(authorizer(), Op.READ, "t")
    assert allowed(authorizer(allow_if_none=True), Op.READ, "t")
    # An ACL on the resource for someone else: no longer "no ACL found".
    a = authorizer(acl("t", Op.READ, principal=BOB), allow_if_none=True)
    assert not allowed(a, Op.READ, "t")
    assert allowed(a, Op.READ, "other")


def test_super_users_may_do_everything() -> None:
    a = authorizer(acl("t", Op.ALL, Perm.DENY, principal="User:*"),
                   supers="User:admin; User:CN=broker,O=x")
    assert allowed(a, Op.WRITE, "t", principal="User:admin")
    assert allowed(a, Op.CLUSTER_ACTION, CLUSTER_NAME, principal="User:CN=broker,O=x",
                   rtype=R.CLUSTER)
    assert not allowed(a, Op.WRITE, "t")


def test_deny_wins_over_allow() -> None:
    a = authorizer(acl("t", Op.ALL), acl("t", Op.WRITE, Perm.DENY))
    assert allowed(a, Op.READ, "t")
    assert not allowed(a, Op.WRITE, "t")
    # A DENY on a prefix beats an ALLOW on the literal name.
    a = authorizer(acl("pay", Op.READ, Perm.DENY, pattern=P.PREFIXED), acl("payments", Op.READ))
    assert not allowed(a, Op.READ, "payments")


def test_implied_operations() -> None:
    a = authorizer(acl("t", Op.READ), acl("c", Op.ALTER_CONFIGS))
    assert allowed(a, Op.DESCRIBE, "t")
    assert not allowed(a, Op.WRITE, "t")
    assert allowed(a, Op.DESCRIBE_CONFIGS, "c")
    assert not allowed(a, Op.DESCRIBE, "c")  # ALTER_CONFIGS implies only DESCRIBE_CONFIGS
    # DENY of DESCRIBE is not implied by a DENY of READ.
    a = authorizer(acl("t", Op.DESCRIBE), acl("t", Op.READ, Perm.DENY))
    assert allowed(a, Op.DESCRIBE, "t")


def test_patterns_wildcards_principals_and_hosts() -> None:
    a = authorizer(acl("*", Op.READ), acl("logs-", Op.WRITE, pattern=P.PREFIXED),
                   acl("t", Op.DELETE, principal="User:*"), acl("h", Op.READ, host=HOST))
    assert allowed(a, Op.READ, "anything")
    assert allowed(a, Op.WRITE, "logs-app")
    assert not allowed(a, Op.WRITE, "log")
    assert allowed(a, Op.DELETE, "t", principal=BOB)
    assert allowed(a, Op.READ, "h")
    assert not allowed(a, Op.READ, "h", principal=BOB)
    b = authorizer(acl("h", Op.READ, host=HOST))
    assert not allowed(b, Op.READ, "h", host="10.0.0.2")
    # Resource types do not mix.
    assert not allowed(authorizer(acl("g", Op.READ)), Op.READ, "g", rtype=R.GROUP)


def test_authorize_any_for_idempotent_producers() -> None:
    a = authorizer(acl("t", Op.WRITE))
    assert a.authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert not a.authorize_any(BOB, HOST, Op.WRITE, R.TOPIC)
    denied = authorizer(acl("t", Op.WRITE), acl("*", Op.WRITE, Perm.DENY))
    assert not denied.authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)
    assert authorizer(acl("p-", Op.WRITE, pattern=P.PREFIXED)).authorize_any(
        ALICE, HOST, Op.WRITE, R.TOPIC)


def test_authorized_operations() -> None:
    a = authorizer(acl("t", Op.READ), acl("t", Op.ALTER_CONFIGS))
    assert a.authorized_operations(ALICE, HOST, R.TOPIC, "t") == {
        Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}


def flt(rtype: R = R.ANY, name: str | None = None, pattern: P = P.ANY,
        principal: str | None = None, op: Op = Op.ANY, perm: Perm = Perm.ANY) -> AclFilter:
    return AclFilter(rtype, name, pattern, principal, None, op, perm)


def test_filters() -> None:
    literal = acl("payments", Op.READ)
    wildcard = acl("*", Op.WRITE)
    prefixed = acl("pay", Op.READ, pattern=P.PREFIXED)
    group = acl("payments", Op.READ, rtype=R.GROUP, principal=BOB)
    every = [literal, wildcard, prefixed, group]

    def select(f: AclFilter) -> list[AclBinding]:
        return [a for a in every if f.matches(a)]

    assert select(flt()) == every
    assert select(flt(R.TOPIC, "payments", P.LITERAL)) == [literal]
    assert select(flt(R.TOPIC, "payments", P.MATCH)) == [literal, wildcard, prefixed]
    assert select(flt(R.TOPIC, "pay", P.PREFIXED)) == [prefixed]
    assert select(flt(principal=BOB)) == [group]
    assert select(flt(op=Op.WRITE)) == [wildcard]
    with pytest.raises(InvalidAcl):
        flt(R.UNKNOWN).validate()


@pytest.mark.parametrize("bad", [
    acl("t", Op.CLUSTER_ACTION),  # not a topic operation
    acl("t", Op.READ, pattern=P.MATCH),
    acl("*", Op.READ, pattern=P.PREFIXED),
    acl("other", Op.ALTER, rtype=R.CLUSTER),
    acl("t", Op.READ, principal="alice"),
    acl("t", Op.READ, Perm.ANY),
    acl("", Op.READ),
    acl("t", Op.ANY),
])
def test_invalid_acls_are_refused(bad: AclBinding) -> None:
    with pytest.raises(InvalidAcl):
        bad.validate()


def test_local_store_persists_and_deletes(tmp_path: object) -> None:
    async def main() -> None:
        store = LocalAclStore(str(tmp_path), authorizer())
        await store.create([acl("t", Op.READ), acl("g", Op.READ, rtype=R.GROUP)])
        assert allowed(store.authorizer, Op.READ, "t")
        reopened = LocalAclStore(str(tmp_path), authorizer())
        assert set(reopened.authorizer.acls) == set(store.authorizer.acls)
        gone = await reopened.delete([flt(R.GROUP), flt(R.USER)])
        assert gone == [[acl("g", Op.READ, rtype=R.GROUP)], []]
        again = LocalAclStore(str(tmp_path), authorizer())
        assert again.authorizer.acls == (acl("t", Op.READ),)

    trio.run(main)


def test_every_api_has_a_guard() -> None:
    """Fail closed: an API served with no guard would be refused."""
    assert set(api.SUPPORTED) - set(GUARDS) == set()


def test_an_api_without_a_guard_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed at run time too: the handler never runs."""
    from types import SimpleNamespace

    from broker.context import NO_SESSION
    from broker.metrics import BrokerMetrics
    from broker.security import guards
    from protocol.api import RequestHeader
    from protocol.errors import ErrorCode

    monkeypatch.delitem(guards.GUARDS, 60)  # DescribeCluster
    ctx = SimpleNamespace(metrics=BrokerMetrics())
    called = []

    async def handler(*args: object) -> None:
        called.append(args)

    async def main() -> object:
        return await guards.authorize_and_handle(
            ctx, authorizer(supers=ALICE), RequestHeader(60, 0, 1, "c", 0), None,  # type: ignore[arg-type]
            NO_SESSION, handler)

    response = trio.run(main)
    assert response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # type: ignore[attr-defined]
    assert called == []
