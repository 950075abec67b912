"""``ssl.principal.mapping.rules``: from a client certificate's subject to
the principal name ACLs are written for (Kafka's SslPrincipalMapper, KIP-371).

The rules are a comma-separated list, tried in order on the subject's
distinguished name in RFC 2253 form (``CN=alice,OU=eng,O=example``):

- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the
  last slash (lower or upper case the result): the first rule whose
  pattern matches the whole name gives the replacement, with ``$1``.. for
  the pattern's groups; ``/`` and ``\\`` in a pattern are escaped with ``\\``;
- ``DEFAULT``: the distinguished name itself.

A name no rule matches has no principal: its connection is refused, as in
Kafka. Example: ``RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT`` maps
``CN=Alice,OU=Eng,O=example`` to ``alice@eng``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One rule and the separator after it (Kafka's grammar).
_RULE = re.compile(r"((DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)(.*?)|(.*?))"
                   r"(,\s*|$)")
_GROUP_REF = re.compile(r"\$(\d+)")


class NoMatchingRule(Exception):
    """No rule maps this distinguished name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        name = match.expand(self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


class PrincipalMapper:
    """Parsed rules.

    Raises:
        ValueError: a rule that cannot be parsed (the reason says which).
    """

    def __init__(self, text: str) -> None:
        self.rules: list[_Rule] = []
        text = text.strip()
        position = 0
        while position < len(text):
            m = _RULE.match(text, position)
            assert m is not None  # the last alternative matches anything
            if m.group(2):
                self.rules.append(_Rule(None))
            elif m.group(3) is not None and not m.group(6):
                try:
                    pattern = re.compile(m.group(3).replace("\\/", "/"))
                except re.error as exc:
                    raise ValueError(f"invalid pattern in {m.group(1)!r}: {exc}") from None
                replacement = _GROUP_REF.sub(r"\\g<\1>", m.group(4).replace("\\/", "/"))
                self.rules.append(_Rule(pattern, replacement, m.group(5)))
            else:
                raise ValueError(f"invalid rule {m.group(1)!r}: expected DEFAULT or "
                                 "RULE:pattern/replacement/[LU]")
            if m.end() == position:
                break
            position = m.end()
        if not self.rules:
            raise ValueError("no rules (DEFAULT is the subject itself)")

    def name(self, dn: str) -> str:
        """The principal name of a distinguished name.

        Raises:
            NoMatchingRule: no rule applies.
        """
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches {dn!r}")
