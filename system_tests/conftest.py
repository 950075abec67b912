"""Fixtures for system tests: broker processes, unique topics, logs on failure.

Broker kind: the environment variable TIERD_TEST_BROKER picks what the
`broker` and `broker_factory` fixtures start - "tierd" (default) or "tansu"
(the scaffold used to validate the client tests before tierd could run).

* `broker` - one broker shared by the whole session (tests isolate themselves
  by topic name). If it dies during a test, that test fails in teardown and
  the next test gets a freshly started broker.
* `broker_factory` - private brokers for tests that stop, kill or restart
  them, or need their own config; torn down after the test.

When a test fails, the part of each broker's log written during that test is
attached to its report.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from system_tests.harness import BrokerProcess, broker_kind, make_broker

# Kafka topic names: [a-zA-Z0-9._-], at most 249 characters.
TOPIC_UNSAFE = re.compile(r"[^a-zA-Z0-9._-]+")
TOPIC_PREFIX_MAX = 200


class BrokerRegistry:
    """Every broker started in this session, for failure reports."""

    def __init__(self) -> None:
        self.brokers: list[BrokerProcess] = []

    def add(self, broker: BrokerProcess) -> BrokerProcess:
        """Track `broker` and return it."""
        self.brokers.append(broker)
        return broker


REGISTRY_KEY = pytest.StashKey[BrokerRegistry]()
LOG_MARKS_KEY = pytest.StashKey[dict[int, int]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[REGISTRY_KEY] = BrokerRegistry()


def pytest_report_header(config: pytest.Config) -> str:
    return f"system tests broker: {broker_kind()} (TIERD_TEST_BROKER)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, attach each broker's log output from this test to the report."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    marks = item.stash.get(LOG_MARKS_KEY, {})
    for broker in item.config.stash[REGISTRY_KEY].brokers:
        start = marks.get(id(broker), 0)
        if broker.log_size() > start:
            title = f"{broker.name} log ({broker.bootstrap}, {broker.log_path})"
            report.sections.append((title, broker.log_tail(start)))


@pytest.fixture(autouse=True)
def _mark_broker_logs(request: pytest.FixtureRequest) -> None:
    """Remember where each known broker's log stood when this test began."""
    registry = request.config.stash[REGISTRY_KEY]
    request.node.stash[LOG_MARKS_KEY] = {id(b): b.log_size() for b in registry.brokers}


@pytest.fixture(scope="session")
def _shared_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("shared-broker")
    broker = request.config.stash[REGISTRY_KEY].add(make_broker(broker_kind(), workdir))
    broker.start()
    yield broker
    broker.close()


@pytest.fixture
def broker(_shared_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The session's shared broker, running; fails the test if it dies during it."""
    if not _shared_broker.is_running():
        _shared_broker.start()
    yield _shared_broker
    if not _shared_broker.is_running():
        pytest.fail(
            f"{_shared_broker.name} died during the test "
            f"(exit status {_shared_broker.returncode()}); see its log section"
        )


BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start private brokers: `broker_factory(config=None, name=None, start=True)`.

    Each gets its own directory under the test's tmp_path; all are stopped
    (SIGTERM, then SIGKILL) after the test.
    """
    registry = request.config.stash[REGISTRY_KEY]
    mine: list[BrokerProcess] = []

    def factory(
        config: Mapping[str, str] | None = None, name: str | None = None, start: bool = True
    ) -> BrokerProcess:
        label = name or f"{broker_kind()}-{len(mine)}"
        broker = make_broker(broker_kind(), tmp_path / label, config=config, name=label)
        registry.add(broker)
        mine.append(broker)
        if start:
            broker.start()
        return broker

    yield factory
    for broker in mine:
        broker.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test run, readable in broker logs."""
    prefix = TOPIC_UNSAFE.sub("-", request.node.name).strip("-")[:TOPIC_PREFIX_MAX]
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
