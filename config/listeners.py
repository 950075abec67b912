"""Listeners: names, security protocols, bind and advertised addresses.

Kafka's model, with Kafka's keys. ``listeners`` lists ``NAME://host:port``
entries; each NAME maps to a security protocol through
``listener.security.protocol.map`` (by default every protocol is a listener
name of its own: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
``advertised.listeners`` names what clients are told, per listener (unset:
``listeners``); a listener missing from it is not advertised, so clients that
connect there get no brokers for it. ``inter.broker.listener.name`` (or the
listener named by ``security.inter.broker.protocol``) is the one brokers use
to reach each other; it must be advertised in cluster mode.

Per-listener settings use Kafka's prefix: ``listener.name.<name>.<key>``
(lower-case name) overrides ``<key>`` for that listener only, e.g.
``listener.name.sasl_ssl.ssl.keystore.location``. ``BrokerConfig.for_listener``
looks keys up that way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from config.defs import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = [f"{p}:{p}" for p in PROTOCOLS]
# Kafka's SecurityProtocol ids (UpdateMetadata carries them).
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
PROTOCOL_NAMES = {v: k for k, v in PROTOCOL_IDS.items()}


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: its name, security protocol, and address (port 0: any)."""

    name: str
    security_protocol: str
    host: str
    port: int

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port if port is None else port}"


def parse_protocol_map(items: list[str]) -> dict[str, str]:
    """``NAME:PROTOCOL`` entries as a dict.

    Raises:
        ConfigError: a malformed entry, an unknown protocol, a name twice.
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or not proto:
            raise ConfigError("listener.security.protocol.map", item, "expected NAME:PROTOCOL")
        if proto not in PROTOCOLS:
            raise ConfigError("listener.security.protocol.map", item,
                              f"unknown security protocol (one of {', '.join(PROTOCOLS)})")
        if name in out:
            raise ConfigError("listener.security.protocol.map", item, f"{name} mapped twice")
        out[name] = proto
    return out


def _split(key: str, item: str) -> tuple[str, str, int]:
    name, sep, rest = item.strip().partition("://")
    host, _, port = rest.rpartition(":")
    if not sep or not name or not port.isdigit():
        raise ConfigError(key, item, "expected NAME://host:port")
    return name.upper(), host.strip("[]") or "0.0.0.0", int(port)


def parse_listeners(key: str, items: list[str], protocols: Mapping[str, str]) -> list[Listener]:
    """``NAME://host:port`` entries as Listeners (empty host: all interfaces).

    Raises:
        ConfigError: a malformed entry, a name without a security protocol,
            a name or a non-zero port twice.
    """
    out: list[Listener] = []
    for item in items:
        name, host, port = _split(key, item)
        proto = protocols.get(name)
        if proto is None:
            raise ConfigError(key, item, f"listener {name} has no security protocol in "
                                         "listener.security.protocol.map")
        if any(listener.name == name for listener in out):
            raise ConfigError(key, item, f"listener name {name} used twice")
        if port and any(listener.port == port and listener.host == host for listener in out):
            raise ConfigError(key, item, f"port {port} used twice")
        out.append(Listener(name, proto, host, port))
    return out


@dataclass(frozen=True, slots=True)
class Listeners:
    """The bound and the advertised listeners, and which one brokers use."""

    bind: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    inter_broker: str

    def advertised_for(self, name: str) -> Listener | None:
        return next((a for a in self.advertised if a.name == name), None)

    def inter_broker_listener(self) -> Listener:
        """The advertised inter-broker listener (checked to exist in cluster mode);
        else the first advertised one."""
        return self.advertised_for(self.inter_broker) or self.advertised[0]


def resolve(values: Mapping[str, Any], explicit: Collection[str]) -> Listeners:
    """Check and assemble the listener keys of a broker config (``explicit``:
    the keys the user set).

    Raises:
        ConfigError: any inconsistency Kafka's broker refuses at start.
    """
    protocols = parse_protocol_map(list(values["listener.security.protocol.map"]))
    bind = parse_listeners("listeners", list(values["listeners"]), protocols)
    if not bind:
        raise ConfigError("listeners", "", "at least one listener is needed")
    adv_items = values["advertised.listeners"]
    if adv_items:
        advertised = parse_listeners("advertised.listeners", list(adv_items), protocols)
        names = {b.name for b in bind}
        for a in advertised:
            if a.name not in names:
                raise ConfigError("advertised.listeners", a.url(),
                                  f"{a.name} is not one of the listeners")
    else:
        advertised = bind
    named = values.get("inter.broker.listener.name")
    proto = str(values["security.inter.broker.protocol"]).upper()
    if named and "security.inter.broker.protocol" in explicit:
        raise ConfigError("inter.broker.listener.name", str(named),
                          "set either inter.broker.listener.name or "
                          "security.inter.broker.protocol, not both")
    if named:
        inter = str(named).upper()
    else:
        # Kafka's default: the listener named like the protocol.
        inter = next((a.name for a in advertised if a.name == proto),
                     next((a.name for a in advertised if a.security_protocol == proto),
                          advertised[0].name))
    if values.get("zookeeper.connect") and not any(a.name == inter for a in advertised):
        raise ConfigError("inter.broker.listener.name", inter,
                          "the inter-broker listener must be one of advertised.listeners")
    return Listeners(tuple(bind), tuple(advertised), inter)
