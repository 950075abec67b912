"""Connection security: TLS (``tls``), SASL (``sasl``, ``scram``), and what each
listener needs of them (``ListenerSecurity``), built once at start."""

from __future__ import annotations

from dataclasses import dataclass

from broker.metrics import BrokerMetrics
from broker.security.limits import ConnectionLimits
from broker.security.sasl import SaslSettings
from broker.security.scram import CredentialStore
from broker.security.tls import ServerTls
from config import BrokerConfig
from config.listeners import Listener


@dataclass(slots=True)
class ListenerSecurity:
    """What a connection on one listener must go through before its requests."""

    listener: Listener
    tls: ServerTls | None
    sasl: SaslSettings | None
    setup_timeout_s: float
    failed_auth_delay_s: float
    idle_timeout_s: float
    # connections.max.reauth.ms (KIP-368) in seconds; 0: sessions never expire.
    reauth_s: float = 0.0
    # Shared by every listener of the broker.
    limits: ConnectionLimits | None = None


def build_listener_security(config: BrokerConfig, listener: Listener, metrics: BrokerMetrics,
                            store: CredentialStore | None,
                            limits: ConnectionLimits | None = None) -> ListenerSecurity:
    """Raises:
        ConfigError: the listener's TLS or SASL settings are unusable.
    """
    tls = None
    if listener.uses_tls:
        tls = ServerTls(config, listener,
                        on_reload_error=metrics.tls_reload_errors.labels(listener.name).inc)
    sasl = SaslSettings.of(config, listener, store) if listener.uses_sasl else None
    return ListenerSecurity(
        listener, tls, sasl,
        setup_timeout_s=config.for_listener(listener.name, "tierd.connection.setup.timeout.ms")
        / 1000,
        failed_auth_delay_s=config.for_listener(
            listener.name, "connection.failed.authentication.delay.ms") / 1000,
        idle_timeout_s=config.for_listener(listener.name, "connections.max.idle.ms") / 1000,
        reauth_s=(config.for_listener(listener.name, "connections.max.reauth.ms") / 1000
                  if sasl is not None else 0.0),
        limits=limits)
