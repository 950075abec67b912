"""Security configuration keys: TLS, SASL, and connection set-up (Kafka's names).

Every key may be given per listener with Kafka's prefix
``listener.name.<listener>.`` (and the SASL JAAS config per mechanism:
``listener.name.<listener>.<mechanism>.sasl.jaas.config``); see
``BrokerConfig.for_listener``. Passwords and key material are PASSWORD
keys: DescribeConfigs never returns them and they are never logged.

Deliberate differences from Kafka: keystores are PEM or PKCS12 (Java's
JKS format cannot be read: convert with ``keytool -importkeystore
-deststoretype PKCS12``); ``ssl.cipher.suites`` takes OpenSSL cipher names
and applies to TLS 1.2 (Python's ssl module cannot restrict TLS 1.3 suites);
GSSAPI and OAUTHBEARER are not offered.
"""

from __future__ import annotations

from config.defs import INT_MAX, ConfigDef
from config.defs import ConfigType as T

TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
STORE_TYPES = ("JKS", "PKCS12", "PEM")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` as {ip: limit}.

    Raises:
        ValueError: not ``ip:count`` entries.
    """
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        ip, sep, count = item.rpartition(":")
        if not sep or not ip or not count.isdigit():
            raise ValueError(f"expected ip:count, got {item!r}")
        out[ip.strip("[]")] = int(count)
    return out


def _check_overrides(value: str) -> str | None:
    try:
        parse_ip_overrides(value)
    except ValueError as exc:
        return str(exc)
    return None


DEFS: list[ConfigDef] = [
    ConfigDef("ssl.keystore.type", T.STRING, "JKS",
              "Keystore format: PEM or PKCS12 (JKS is refused with how to convert it).",
              choices=STORE_TYPES),
    ConfigDef("ssl.keystore.location", T.STRING, None,
              "Keystore file: PKCS12, or PEM holding the private key and certificate chain."),
    ConfigDef("ssl.keystore.password", T.PASSWORD, None,
              "Password of a PKCS12 keystore (of a PEM key if ssl.key.password is unset).",
              sensitive=True),
    ConfigDef("ssl.key.password", T.PASSWORD, None, "Password of the private key.",
              sensitive=True),
    ConfigDef("ssl.keystore.key", T.PASSWORD, None,
              "Private key in PEM, inline (ssl.keystore.type=PEM).", sensitive=True),
    ConfigDef("ssl.keystore.certificate.chain", T.PASSWORD, None,
              "Certificate chain in PEM, inline (ssl.keystore.type=PEM).", sensitive=True),
    ConfigDef("ssl.truststore.type", T.STRING, "JKS",
              "Truststore format: PEM or PKCS12.", choices=STORE_TYPES),
    ConfigDef("ssl.truststore.location", T.STRING, None,
              "Truststore file: PEM CA certificates or PKCS12."),
    ConfigDef("ssl.truststore.password", T.PASSWORD, None, "Password of a PKCS12 truststore.",
              sensitive=True),
    ConfigDef("ssl.truststore.certificates", T.PASSWORD, None,
              "Trusted CA certificates in PEM, inline (ssl.truststore.type=PEM).",
              sensitive=True),
    ConfigDef("ssl.client.auth", T.STRING, "none",
              "Client certificates: none, requested (verified if sent) or required.",
              choices=("none", "requested", "required")),
    ConfigDef("ssl.enabled.protocols", T.LIST, list(TLS_VERSIONS),
              "TLS versions accepted.", choices=TLS_VERSIONS),
    ConfigDef("ssl.protocol", T.STRING, "TLSv1.3", "Kafka's SSLContext protocol (informative)."),
    ConfigDef("ssl.cipher.suites", T.LIST, [],
              "TLS 1.2 cipher suites (OpenSSL names); empty: OpenSSL's defaults."),
    ConfigDef("ssl.endpoint.identification.algorithm", T.STRING, "https",
              "Check the peer's host name in inter-broker TLS ('https'), or not (empty)."),
    ConfigDef("ssl.principal.mapping.rules", T.STRING, "DEFAULT",
              "Principal of a TLS client: rules tried in order on the certificate's subject "
              "(RFC 2253), RULE:pattern/replacement/[LU] (e.g. RULE:^CN=(.*?),.*$/$1/L) or "
              "DEFAULT (the subject itself); a subject no rule matches is refused."),
    ConfigDef("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"],
              "SASL mechanisms offered on SASL listeners (PLAIN, SCRAM-SHA-256, "
              "SCRAM-SHA-512; Kafka's default GSSAPI is refused)."),
    ConfigDef("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI",
              "SASL mechanism brokers use towards each other."),
    ConfigDef("sasl.jaas.config", T.PASSWORD, None,
              "JAAS login module options: users (user_<name>=\"password\") for PLAIN, "
              "username/password for inter-broker authentication.", sensitive=True),
    ConfigDef("connection.failed.authentication.delay.ms", T.INT, 100,
              "Delay before closing a connection whose authentication failed.", at_least=0),
    ConfigDef("max.connections", T.INT, INT_MAX,
              "Open connections the broker (or, prefixed, one listener) accepts; the "
              "inter-broker listener is exempt from the broker-wide limit.", at_least=0),
    ConfigDef("max.connections.per.ip", T.INT, INT_MAX,
              "Open connections accepted from one IP address.", at_least=0),
    ConfigDef("max.connections.per.ip.overrides", T.STRING, "",
              "Per-IP exceptions: ip:count,ip:count.", check=_check_overrides),
    ConfigDef("max.connection.creation.rate", T.INT, INT_MAX,
              "New connections per second a listener (or the broker) takes on; faster "
              "arrivals wait.", at_least=0),
    ConfigDef("connections.max.reauth.ms", T.LONG, 0,
              "KIP-368: a SASL client must authenticate again within this long (it is told "
              "in SaslAuthenticate's session lifetime); a connection whose session expired "
              "is closed at its next request other than re-authentication. 0: never.",
              at_least=0),
    ConfigDef("connections.max.idle.ms", T.LONG, 600000,
              "A connection that sends nothing for this long is closed.", at_least=1),
    ConfigDef("quota.window.num", T.INT, 11, "Samples a client quota's rate is measured over.",
              at_least=1),
    ConfigDef("quota.window.size.seconds", T.INT, 1, "Length of one quota sample.",
              at_least=1),
    ConfigDef("authorizer.class.name", T.STRING, "",
              "Set (to any name, e.g. Kafka's kafka.security.authorizer.AclAuthorizer or "
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer) to check every "
              "request against ACLs; empty: every client may do everything."),
    ConfigDef("super.users", T.STRING, "",
              "Principals allowed everything, separated by ';' (e.g. User:admin;User:broker)."),
    ConfigDef("allow.everyone.if.no.acl.found", T.BOOLEAN, False,
              "With an authorizer, allow an operation on a resource that has no ACL at all."),
    ConfigDef("tierd.connection.setup.timeout.ms", T.INT, 10000,
              "A connection that has not finished its TLS handshake and SASL "
              "authentication by then is closed.", at_least=1),
]
