"""Config definitions: type, default, validation and Kafka's describe metadata.

A ``ConfigDef`` turns the string a user wrote (server.properties, an
override, a CreateTopics config) into a typed value, or raises
``ConfigError`` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigs ConfigType numbers (KIP-569)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigError(ValueError):
    """An invalid configuration value."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        super().__init__(f"Invalid value {value!r} for configuration {key}: {allowed}")
        self.key = key
        self.value = value
        self.allowed = allowed


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: Any
    doc: str
    at_least: float | None = None
    at_most: float | None = None
    choices: Sequence[str] | None = None
    check: Callable[[Any], str | None] | None = None
    sensitive: bool = False

    def parse(self, raw: object) -> Any:
        """Convert ``raw`` (usually a string) to this config's type and validate it.

        Raises:
            ConfigError: unparseable or out-of-range value.
        """
        if raw is None:
            return None
        value = self._convert(raw)
        self._validate(value)
        return value

    def _convert(self, raw: object) -> Any:
        text = str(raw).strip()
        try:
            if self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
                return int(text)
            if self.type is ConfigType.DOUBLE:
                return float(text)
            if self.type is ConfigType.BOOLEAN:
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                return text.lower() == "true"
            if self.type is ConfigType.LIST:
                return [p.strip() for p in text.split(",") if p.strip()]
        except ValueError:
            raise ConfigError(self.name, raw, f"expected type {self.type.name.lower()}") from None
        return text

    def _validate(self, value: Any) -> None:
        limits = {ConfigType.INT: INT_MAX, ConfigType.SHORT: 2**15 - 1, ConfigType.LONG: LONG_MAX}
        if self.type in limits and not -limits[self.type] - 1 <= value <= limits[self.type]:
            raise ConfigError(self.name, value, f"out of range for a {self.type.name.lower()}")
        if self.at_least is not None and value < self.at_least:
            raise ConfigError(self.name, value, f"must be at least {self.at_least:g}")
        if self.at_most is not None and value > self.at_most:
            raise ConfigError(self.name, value, f"must be at most {self.at_most:g}")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [v for v in items if v not in self.choices]
            if bad or (isinstance(value, list) and not value):
                raise ConfigError(self.name, value, f"must be one of {list(self.choices)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(self.name, value, problem)

    def render(self, value: Any) -> str | None:
        """The string form used in DescribeConfigs."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return ",".join(value)
        return str(value)
