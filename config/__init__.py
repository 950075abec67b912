"""Broker and topic configuration with Kafka's key names and defaults."""

from config.broker import BrokerConfig, ConfigError
from config.topic import LogConfig, TopicConfigs

__all__ = ["BrokerConfig", "ConfigError", "LogConfig", "TopicConfigs"]
