"""Wire fuzzing of a live tierd: tens of thousands of random and mutated frames.

Two kinds of input, both built with kafka-python's protocol classes:

* structured random requests: every API and version the broker advertises
  in ApiVersions, each field filled from the schema with hostile values
  (negative and maximal integers, empty / odd / overlong strings, unknown
  topic ids, corrupt record sets). They decode, so they reach the handlers.
* random and mutated frames: seeds (valid requests of every advertised API
  and version, populated for the data path, default-valued for the rest,
  plus requests of APIs tierd lacks) or structured requests put through one
  to three mutators - bit flips, byte and integer overwrites (counts and
  lengths that lie), varint insertion, truncation, extension, splices,
  random api key/version - or wholly random bytes, or size prefixes that lie.

Worker threads pipeline a few structured requests followed by one mutated
frame per batch, count what the broker read and answered, and reconnect
whenever it closes the connection or stalls, or a frame left it waiting for
bytes that will never come.

Throughout, a kafka-python client on its own connections produces and
consumes (every `CHECK_EVERY` frames), and the broker's resident memory is
sampled. At the end the broker must be alive, answer Metadata, have stayed
within `RSS_LIMIT_BYTES` / `RSS_GROWTH_LIMIT_BYTES`, never have raised out of
a request handler (tierd_protocol_errors{reason=handler_error|connection_error}
stays 0: such exceptions are broker bugs by the architecture's rules), and
the fuzzed topic must hold only intact, contiguous batches.

Not fuzzed: the APIs that change cluster state (CreateTopics, DeleteTopics,
DeleteRecords, AlterConfigs, IncrementalAlterConfigs, CreatePartitions,
AlterReplicaLogDirs). A mutated CreateTopics may legitimately ask for a
million partitions; their validation is covered by test_bad_input.py.
Mutations that land on one of their api keys are re-drawn.

Set TIERD_FUZZ_SEED to replay a run (timing still varies between runs).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from kafka.protocol import admin, consumer, metadata, producer
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataResponse

from protocol.records import build_batch
from system_tests._proc import (
    HealthyClient,
    RawClient,
    TierdProc,
    batch_crc_ok,
    encode_request,
    fetch_request,
    list_offsets_request,
    metadata_request,
    produce_request,
    read_batches,
    scrape,
    start_tierd,
)
from system_tests.admin import create_topic

# Random/mutated frames (structured requests come on top): at least
# FRAMES_REQUIRED must reach the broker; the run stops at FRAMES_GOAL or after
# TIME_BUDGET_S, whichever comes first.
FRAMES_REQUIRED = 20_000
FRAMES_GOAL = 22_000
TIME_BUDGET_S = 80.0

# Healthy-client round trip (and RSS sample) every this many frames.
CHECK_EVERY = 1_000

# Resident memory bounds: the broker idles around 50 MB; a frame
# that makes it allocate per announced length would blow far past these.
RSS_LIMIT_BYTES = 300 * 1024 * 1024
RSS_GROWTH_LIMIT_BYTES = 100 * 1024 * 1024

# Fuzzing threads: enough to interleave connections on the broker, few
# enough that the healthy client still gets CPU on 2 cores.
WORKERS = 3

# Structured requests pipelined ahead of each mutated frame (0 to this many).
MAX_BATCH = 3

# A connection with nothing to read for this long is given up (the broker
# may legitimately wait, e.g. for the rest of a frame whose size lied).
IDLE_S = 0.1

# socket.request.max.bytes of the fuzzed broker, and the size of the frames
# that lie about their length by a lot.
MAX_REQUEST_BYTES = 1_048_576

# API keys whose requests change cluster state (see the module docstring).
STATEFUL_KEYS = frozenset({19, 20, 21, 33, 34, 37, 44})

# Interesting values for integer overwrites: counts and lengths that lie.
INT16_VALUES = (-1, 0, 1, 0x7FFF, -0x8000, 0x100)
INT32_VALUES = (-1, 0, 1, 0x7FFFFFFF, -0x80000000, 1 << 20, 0xFFFF, 64 * 1024 * 1024)

FUZZ_TOPIC = "fuzz-target"
FUZZ_PARTITIONS = 2

REQUEST_CLASSES = {
    cls.API_KEY: cls
    for module in (admin, consumer, metadata, producer)
    for name in dir(module)
    if name.endswith("Request")
    for cls in [getattr(module, name)]
    if hasattr(cls, "API_KEY")
}


@dataclass(frozen=True)
class Frame:
    """Bytes to send; `open_ended` if the broker will wait for more after them."""

    data: bytes
    open_ended: bool = False
    expects_response: bool = True


# ---------------------------------------------------------------------------
# Seeds and structured random requests.


def _advertised(broker: TierdProc) -> dict[int, tuple[int, int]]:
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(
            ApiVersionsRequest[3](client_software_name="fuzz", client_software_version="1"),
            3,
            ApiVersionsResponse,
        )
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _valid_batch(rng: random.Random) -> bytes:
    return build_batch(
        [(b"k%d" % i, b"fuzz-value-%d" % i) for i in range(rng.randint(1, 4))], timestamp=_now_ms()
    )


def _populated(key: int, version: int, topic_id: uuid.UUID) -> list[object]:
    """Requests with real content for the APIs whose handlers go deepest."""
    batch = _valid_batch(random.Random(key))
    wanted = {(FUZZ_TOPIC, p): 0 for p in range(FUZZ_PARTITIONS)}
    if key == 0:
        return [
            produce_request(FUZZ_TOPIC, p, batch, acks, version)
            for p in range(FUZZ_PARTITIONS)
            for acks in (1, -1)
        ]
    if key == 1:
        req = fetch_request(wanted, version, max_bytes=64 * 1024)
        if version >= 13:
            for t in req.topics:
                t.topic_id = topic_id
        return [req]
    if key == 2:
        return [
            list_offsets_request(FUZZ_TOPIC, {0: -1, 1: -2}, version),
            list_offsets_request(FUZZ_TOPIC, {0: 0}, version),
        ]
    if key == 3:
        return [metadata_request([FUZZ_TOPIC], version), metadata_request(None, version)]
    if key == 23:
        cls = consumer.OffsetForLeaderEpochRequest
        topic_cls = cls.OffsetForLeaderTopic
        return [
            cls[version](
                replica_id=-1,
                topics=[
                    topic_cls(
                        topic=FUZZ_TOPIC,
                        partitions=[
                            topic_cls.OffsetForLeaderPartition(
                                partition=0, current_leader_epoch=-1, leader_epoch=0
                            )
                        ],
                    )
                ],
            )
        ]
    if key == 32:
        cls = admin.DescribeConfigsRequest
        return [
            cls[version](
                resources=[
                    cls.DescribeConfigsResource(
                        resource_type=2, resource_name=FUZZ_TOPIC, configuration_keys=None
                    )
                ]
            )
        ]
    return []


@dataclass(frozen=True)
class Fuzzable:
    """What the workers draw from: encoded seeds and the (api, version)s to
    generate structured random requests for."""

    seeds: list[bytes]
    versions: list[tuple[int, int]]
    topic_id: uuid.UUID


def build_corpus(advertised: dict[int, tuple[int, int]], topic_id: uuid.UUID) -> Fuzzable:
    """Seeds (header + body, no size) for every advertised non-stateful (api,
    version), plus default requests of APIs tierd lacks."""
    seeds = []
    versions = []
    for key, (lo, hi) in sorted(advertised.items()):
        if key in STATEFUL_KEYS or key not in REQUEST_CLASSES:
            continue
        for version in range(lo, hi + 1):
            versions.append((key, version))
            for req in [*_populated(key, version, topic_id), REQUEST_CLASSES[key][version]()]:
                seeds.append(encode_request(req, version, len(seeds) + 1)[4:])
    for key, cls in sorted(REQUEST_CLASSES.items()):
        if key not in advertised and key not in STATEFUL_KEYS:
            seeds.append(encode_request(cls[cls.max_version](), cls.max_version, key)[4:])
    return Fuzzable(seeds, versions, topic_id)


def _random_scalar(rng: random.Random, type_str: str, name: str, corpus: Fuzzable) -> object:
    if name == "acks":
        return rng.choice((-1, 1, 1, 0, 2, -2))
    if "timeout" in name or "wait" in name:
        # Bounded: a fetch parked for hours is legal and would only stall the fuzzer.
        return rng.choice((-1, 0, 0, 5, 50))
    if type_str == "int8":
        return rng.choice((-1, 0, 1, 2, 127, -128))
    if type_str == "int16":
        return rng.choice((*INT16_VALUES, 2, 3))
    if type_str == "int32":
        return rng.choice((*INT32_VALUES, 0, 1, 2, rng.randint(-(2**31), 2**31 - 1)))
    if type_str == "int64":
        return rng.choice(
            (-1, -2, -3, -4, -5, -6, 0, 1, 2**63 - 1, -(2**63), _now_ms(), rng.randint(-(2**63), 2**63 - 1))
        )
    if type_str == "bool":
        return rng.random() < 0.5
    if type_str == "string":
        return rng.choice(
            (FUZZ_TOPIC, FUZZ_TOPIC, "", "x", "ü-ñ", "a" * 300, "../..", rng.randbytes(8).hex())
        )
    if type_str == "uuid":
        return rng.choice((corpus.topic_id, uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))))
    if type_str == "bytes":
        return rng.choice((b"", rng.randbytes(rng.randint(1, 64))))
    if type_str == "float64":
        return rng.choice((0.0, -1.0, float("inf"), float("nan"), 1e308))
    if type_str == "records":
        return rng.choice(
            (_valid_batch(rng), b"", rng.randbytes(rng.randint(1, 120)), _valid_batch(rng) + rng.randbytes(7))
        )
    raise AssertionError(f"no generator for {type_str}")


def _random_fields(
    rng: random.Random, struct_field: object, version: int, corpus: Fuzzable, depth: int = 0
) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, f in struct_field.fields.items():  # type: ignore[attr-defined]
        if not f.for_version_q(version):
            continue
        if f.nullable_for_version_q(version) and rng.random() < 0.1:
            values[name] = None
        elif f.is_struct_array() or f.is_struct():
            count = rng.choice((0, 1, 1, 2, 3)) if depth < 3 else 0
            items = [
                f.data_class(**_random_fields(rng, f, version, corpus, depth + 1))
                for _ in range(count if f.is_struct_array() else 1)
            ]
            values[name] = items if f.is_struct_array() else items[0]
        elif f.is_array():
            inner = f.type_str.removeprefix("[]")
            values[name] = [_random_scalar(rng, inner, name, corpus) for _ in range(rng.choice((0, 1, 2, 5)))]
        else:
            values[name] = _random_scalar(rng, f.type_str, name, corpus)
    return values


def structured_request(rng: random.Random, corpus: Fuzzable) -> tuple[bytes, bool]:
    """A well-formed request of a random advertised (api, version) with random
    field values; returns (payload, whether a response is due)."""
    key, version = rng.choice(corpus.versions)
    cls = REQUEST_CLASSES[key]
    fields = _random_fields(rng, cls._struct, version, corpus)
    payload = encode_request(cls[version](**fields), version, rng.randint(0, 2**31 - 1))[4:]
    return payload, not (key == 0 and fields.get("acks") == 0)


# ---------------------------------------------------------------------------
# Mutations.


def _flip_bits(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)


def _set_bytes(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.choice((0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)))


def _lie_int(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    """Overwrite an int16/int32 somewhere past the header: a count or length that lies."""
    fmt, values = rng.choice(((">h", INT16_VALUES), (">i", INT32_VALUES)))
    width = struct.calcsize(fmt)
    if len(b) > 8 + width:
        struct.pack_into(fmt, b, rng.randrange(8, len(b) - width + 1), rng.choice(values))


def _lie_varint(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    """Insert an unsigned varint: a compact (flexible-version) length that lies."""
    value = rng.choice((0, 1, 0x7F, 0x3FFF, 0xFFFFFFF, 0x7FFFFFFF))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    at = rng.randrange(8, len(b) + 1) if len(b) > 8 else len(b)
    b[at:at] = out


def _truncate(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    del b[rng.randrange(len(b)) :]


def _extend(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    b += rng.randbytes(rng.randint(1, 64))


def _splice(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    other = rng.choice(seeds)
    start = rng.randrange(len(other))
    piece = other[start : start + rng.randint(1, 64)]
    at = rng.randrange(len(b) + 1)
    b[at : at + rng.randint(0, 16)] = piece


def _delete_slice(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    at = rng.randrange(len(b))
    del b[at : at + rng.randint(1, 16)]


def _api_key_version(rng: random.Random, b: bytearray, seeds: list[bytes]) -> None:
    key = rng.choice((rng.randint(-2, 80), rng.randint(-0x8000, 0x7FFF)))
    version = rng.choice((rng.randint(-1, 20), rng.randint(-0x8000, 0x7FFF)))
    if len(b) >= 4:
        struct.pack_into(">hh", b, 0, key, version)


MUTATORS: tuple[Callable[[random.Random, bytearray, list[bytes]], None], ...] = (
    _flip_bits,
    _flip_bits,
    _set_bytes,
    _lie_int,
    _lie_int,
    _lie_varint,
    _truncate,
    _extend,
    _splice,
    _delete_slice,
    _api_key_version,
)


def _stateful(payload: bytes | bytearray) -> bool:
    return len(payload) >= 2 and struct.unpack_from(">h", payload)[0] in STATEFUL_KEYS


def structured_frame(rng: random.Random, corpus: Fuzzable) -> Frame:
    payload, answered = structured_request(rng, corpus)
    return Frame(struct.pack(">i", len(payload)) + payload, expects_response=answered)


def mutated_frame(rng: random.Random, corpus: Fuzzable) -> Frame:
    """One random or mutated frame. The mix: 4% raw random bytes, 4% frames
    of random bytes, 5% a valid header over a random body, the rest a seed or
    a structured request put through one to three mutators; 6% of those get
    a size prefix that lies."""
    kind = rng.random()
    if kind < 0.04:  # random bytes, no framing at all
        return Frame(rng.randbytes(rng.randint(1, 200)), open_ended=True)
    if kind < 0.08:  # a frame of random bytes
        payload = rng.randbytes(rng.randint(0, 300))
        if _stateful(payload):
            payload = b"\x00\x63" + payload[2:]
        return Frame(struct.pack(">i", len(payload)) + payload)
    while True:
        if kind < 0.5:
            b = bytearray(structured_request(rng, corpus)[0])
        else:
            b = bytearray(rng.choice(corpus.seeds))
        if kind < 0.13:  # a valid header over a random body
            del b[rng.randint(10, 30) :]
            b += rng.randbytes(rng.randint(0, 200))
        else:
            for _ in range(rng.choice((1, 1, 1, 2, 3))):
                if b:
                    rng.choice(MUTATORS)(rng, b, corpus.seeds)
        if not _stateful(b):
            break
    size_lie = rng.random()
    if size_lie < 0.03:  # announces more than follows: the broker waits for the rest
        extra = rng.choice((1, 100, MAX_REQUEST_BYTES - len(b)))
        return Frame(struct.pack(">i", len(b) + max(extra, 1)) + bytes(b), open_ended=True)
    if size_lie < 0.06 and len(b) > 1:  # announces less: the rest reads as the next frame
        return Frame(struct.pack(">i", rng.randrange(len(b))) + bytes(b), open_ended=True)
    return Frame(struct.pack(">i", len(b)) + bytes(b))


# ---------------------------------------------------------------------------
# Sending.


@dataclass
class Tally:
    """Counters shared by the workers (under `lock`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    mutated: int = 0
    structured: int = 0
    bytes_sent: int = 0
    responses: int = 0
    connections: int = 0
    closed_by_broker: int = 0
    stalled: int = 0

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)


def _connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Close with RST: thousands of connections must not pile up in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return sock


def _send(sock: socket.socket, data: bytes) -> int:
    """Send what the socket takes; return the bytes handed to the kernel."""
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent:])
    except OSError:
        pass
    return sent


def _read_responses(sock: socket.socket, expected: int) -> tuple[int, str]:
    """Count response frames until `expected`, EOF/reset ("closed") or IDLE_S of silence."""
    buf = bytearray()
    got = 0
    while got < expected:
        sock.settimeout(IDLE_S)
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            return got, "stalled"
        except OSError:
            return got, "closed"
        if not chunk:
            return got, "closed"
        buf += chunk
        while len(buf) >= 4:
            (size,) = struct.unpack_from(">i", buf)
            if len(buf) < 4 + size:
                break
            del buf[: 4 + size]
            got += 1
    return got, "open"


def _processed(frames: list[Frame], responses: int, state: str) -> int:
    """How many leading frames of a pipelined batch the broker got to.

    Responses come in request order, so the first `responses` answerable
    frames (and the unanswerable ones among them) were handled; if the
    broker then closed or went quiet, the next frame is the one it stopped at.
    """
    if state == "open":
        return len(frames)
    done = 0
    for f in frames:
        done += 1
        if f.expects_response and not f.open_ended:
            if responses == 0:
                return done
            responses -= 1
    return done


def fuzz_worker(
    host: str, port: int, corpus: Fuzzable, rng: random.Random, tally: Tally, stop: threading.Event
) -> None:
    """Pipeline batches: a few structured requests, then one mutated frame.

    The mutated frame goes last because it usually makes the broker close
    the connection; with nothing unread behind it the close is a FIN, and the
    answers to the requests before it should still arrive (tierd currently
    drops them; see test_bad_input's pipelining test). Counting is
    conservative: a frame counts only if the answers show the broker got to it.
    """
    sock: socket.socket | None = None
    while not stop.is_set():
        if sock is None:
            sock = _connect(host, port)
            tally.add(connections=1)
        frames = [structured_frame(rng, corpus) for _ in range(rng.randint(0, MAX_BATCH))]
        frames.append(mutated_frame(rng, corpus))
        data = b"".join(f.data for f in frames)
        sent = _send(sock, data)
        expected = sum(1 for f in frames if f.expects_response and not f.open_ended)
        got, state = _read_responses(sock, expected)
        done = _processed(frames, got, state) if sent == len(data) else 0
        tally.add(
            structured=min(done, len(frames) - 1),
            mutated=done == len(frames),
            bytes_sent=sent,
            responses=got,
            closed_by_broker=state == "closed",
            stalled=state == "stalled",
        )
        if state != "open" or frames[-1].open_ended:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


@pytest.fixture
def fuzz_broker(request: pytest.FixtureRequest, tmp_path) -> TierdProc:
    return start_tierd(
        request,
        tmp_path / "fuzz",
        {
            "auto.create.topics.enable": "false",
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
        },
        name="tierd-fuzz",
    )


def _topic_id(broker: TierdProc) -> uuid.UUID:
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(metadata_request([FUZZ_TOPIC], 12), 12, MetadataResponse)
    [meta] = resp.topics
    assert meta.error_code == 0, meta
    return meta.topic_id


def _assert_topic_intact(broker: TierdProc, topic: str, partitions: int) -> int:
    """Every stored batch of `topic` has a good CRC and offsets follow on; returns records."""
    records = 0
    with RawClient(broker.host, broker.port) as client:
        for p in range(partitions):
            batches, high_watermark = read_batches(client, topic, p)
            assert all(batch_crc_ok(b) for b in batches), f"corrupt batch in {topic}-{p}"
            records += high_watermark
    return records


def _distinct_crashes(log: str) -> list[str]:
    """One line per distinct (handler location, exception) among the logged tracebacks."""
    found: dict[str, int] = {}
    for block in log.split("Traceback (most recent call last):")[1:]:
        lines = block.splitlines()
        frames = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
        error = next((ln for ln in lines if ln and not ln.startswith(" ")), "?")
        key = f"{frames[-1] if frames else '?'}: {error}"
        found[key] = found.get(key, 0) + 1
    return [f"{n}x {key}" for key, n in sorted(found.items(), key=lambda kv: -kv[1])]


def test_fuzzed_frames_do_not_hurt_the_broker(
    fuzz_broker: TierdProc, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = fuzz_broker
    create_topic(broker.bootstrap, FUZZ_TOPIC, partitions=FUZZ_PARTITIONS)
    create_topic(broker.bootstrap, "healthy-fuzz")
    healthy = HealthyClient(broker.bootstrap, "healthy-fuzz")
    healthy.check()
    corpus = build_corpus(_advertised(broker), _topic_id(broker))
    seed = int(os.environ.get("TIERD_FUZZ_SEED", "405"))
    rss_start = rss_max = broker.rss_bytes()
    tally = Tally()
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            fuzz_worker(broker.host, broker.port, corpus, random.Random(seed * 100 + worker), tally, stop)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(WORKERS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    next_check = CHECK_EVERY
    try:
        while not stop.is_set():
            time.sleep(0.05)
            done = tally.mutated + tally.structured
            if done >= next_check:
                assert broker.is_running(), f"broker died after ~{done} frames"
                healthy.check()
                rss_max = max(rss_max, broker.rss_bytes())
                next_check = done + CHECK_EVERY
            if tally.mutated >= FRAMES_GOAL or time.monotonic() - started > TIME_BUDGET_S:
                break
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    elapsed = time.monotonic() - started
    assert not errors, errors
    summary = (
        f"fuzz (seed {seed}, {len(corpus.seeds)} seeds): {tally.mutated} random/mutated "
        f"frames + {tally.structured} structured random requests sent and read by the broker "
        f"in {elapsed:.1f}s ({tally.bytes_sent >> 10} KiB, {tally.connections} connections); "
        f"{tally.responses} responses, {tally.closed_by_broker} connections closed by the "
        f"broker, {tally.stalled} stalled; {healthy.checks} healthy checks; "
        f"RSS {rss_start >> 20} -> max {rss_max >> 20} MiB"
    )
    with capsys.disabled():
        print(f"\n{summary}")

    assert broker.is_running(), f"broker exited with {broker.returncode()}"
    healthy.check()
    rss_max = max(rss_max, broker.rss_bytes())
    with RawClient(broker.host, broker.port) as client:
        resp = client.request(metadata_request(None, 9), 9, MetadataResponse)
    assert {t.name for t in resp.topics} >= {FUZZ_TOPIC, "healthy-fuzz"}
    assert all(t.error_code == 0 for t in resp.topics)
    healthy.close()

    assert tally.mutated >= FRAMES_REQUIRED, f"only {tally.mutated} frames in {TIME_BUDGET_S}s"
    # The fuzz reached the handlers (most structured requests answered) and
    # the decoders (many mutated frames rejected).
    assert tally.responses >= tally.structured // 2
    assert tally.closed_by_broker >= tally.mutated // 4
    assert rss_max < RSS_LIMIT_BYTES, f"RSS reached {rss_max >> 20} MiB"
    assert rss_max - rss_start < RSS_GROWTH_LIMIT_BYTES, f"RSS grew {(rss_max - rss_start) >> 20} MiB"
    assert _assert_topic_intact(broker, FUZZ_TOPIC, FUZZ_PARTITIONS) > 0
    # No request made the broker raise: such exceptions are its own bugs.
    metrics = scrape(broker.metrics_url)
    crashes = {
        reason: metrics.total("tierd_protocol_errors_total", reason=reason)
        for reason in ("handler_error", "connection_error")
    }
    if any(crashes.values()):
        summary = "\n".join(_distinct_crashes(broker.log_text()))
        pytest.fail(f"broker raised on fuzzed input {crashes}:\n{summary}")
