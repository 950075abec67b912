"""One driver per Kafka client library, all behind `base.ClientDriver`.

`DRIVERS` maps a short name to a driver instance; tests parametrise over it.
"""

from __future__ import annotations

from system_tests.clients.aiokafka_client import AiokafkaDriver
from system_tests.clients.base import CODECS, ClientDriver, ConsumeTimeout, ProduceFailed
from system_tests.clients.confluent_client import ConfluentDriver
from system_tests.clients.java_client import JavaDriver
from system_tests.clients.kafka_python_client import KafkaPythonDriver
from system_tests.clients.kcat_client import KcatDriver

DRIVERS: dict[str, ClientDriver] = {
    driver.name: driver
    for driver in (
        KafkaPythonDriver(),
        AiokafkaDriver(),
        ConfluentDriver(),
        KcatDriver(),
        JavaDriver(),
    )
}

__all__ = ["CODECS", "DRIVERS", "ClientDriver", "ConsumeTimeout", "ProduceFailed"]
