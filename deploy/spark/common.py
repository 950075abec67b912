"""What the pipeline's jobs share: the event schema, the per-key per-UTC-day
aggregation, the Kafka source options and the command-line arguments.

An event is one Kafka record whose value is JSON::

    {"key": "k1", "ts": 1735689600000, "amount": 12.34}

``ts`` is epoch milliseconds, ``amount`` a number with at most two decimals
(parsed as DECIMAL(18, 2), so sums are exact). A record whose value is not
such an object (not JSON, or a field missing) is skipped.
"""

from __future__ import annotations

import argparse
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

from deploy.spark.session import build_session

AMOUNT_TYPE = DecimalType(18, 2)
EVENT_SCHEMA = StructType([
    StructField("key", StringType()),
    StructField("ts", LongType()),
    StructField("amount", AMOUNT_TYPE),
])
MS_PER_DAY = 86_400_000

# Isolation levels of Kafka's consumer (isolation.level). read_committed is
# the default here: with transactional producers, aborted records must not
# count.
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")

# How long one executor-side consumer poll may wait for data. Spark's default
# is spark.network.timeout (120 s); a leader failover (ZooKeeper session
# timeout plus an election) is well inside this.
DEFAULT_POLL_TIMEOUT_MS = 60_000


def add_kafka_args(parser: argparse.ArgumentParser, *, batch: bool) -> None:
    """Arguments for reading the input topic (and the session's --master/--jars)."""
    parser.add_argument("--bootstrap", required=True, help="bootstrap servers, host:port[,...]")
    parser.add_argument("--topic", required=True, help="input topic")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="earliest, latest or Spark's JSON per-partition offsets "
                             "(streaming: first run only; later runs resume from the checkpoint)")
    if batch:
        parser.add_argument("--ending-offsets", default="latest",
                            help="latest or Spark's JSON per-partition offsets")
    parser.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default="read_committed")
    parser.add_argument("--poll-timeout-ms", type=int, default=DEFAULT_POLL_TIMEOUT_MS)
    add_client_args(parser)
    add_session_args(parser)


def add_client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE",
                        help="a Kafka client setting (e.g. security.protocol=SSL), repeatable")


def add_session_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, or local[*])")
    parser.add_argument("--jars", default=None,
                        help="comma-separated jars for the JVM this script starts (default: "
                             "$TIERD_SPARK_JARS or .deps/spark-jars/; unused under spark-submit, "
                             "give it --packages or --jars)")


def session_for(args: argparse.Namespace, app_name: str) -> SparkSession:
    jars = None if args.jars is None else [j for j in args.jars.split(",") if j]
    return build_session(app_name, master=args.master, jars=jars)


def kafka_source_options(args: argparse.Namespace) -> dict[str, Any]:
    """Options of Spark's Kafka source for the input topic."""
    options: dict[str, Any] = {
        "kafka.bootstrap.servers": args.bootstrap,
        "subscribe": args.topic,
        "startingOffsets": args.starting_offsets,
        "kafka.isolation.level": args.isolation_level,
        "kafkaConsumer.pollTimeoutMs": str(args.poll_timeout_ms),
    }
    if getattr(args, "ending_offsets", None) is not None:
        options["endingOffsets"] = args.ending_offsets
    options.update(client_options(args))
    return options


def client_options(args: argparse.Namespace) -> dict[str, str]:
    """``--kafka KEY=VALUE`` settings as Spark's ``kafka.KEY`` options.

    Raises:
        SystemExit: a setting without ``=``.
    """
    options = {}
    for setting in args.kafka:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise SystemExit(f"--kafka wants KEY=VALUE, got {setting!r}")
        options[f"kafka.{key}"] = value
    return options


def utc_day(ts_ms: Column) -> Column:
    """The UTC calendar day of an epoch-millisecond column (independent of
    the session's time zone)."""
    return F.date_from_unix_date(F.floor(ts_ms / MS_PER_DAY).cast("int"))


def parse_events(raw: DataFrame) -> DataFrame:
    """Kafka records -> (key, ts, amount, day) events; malformed values dropped."""
    parsed = raw.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    events = parsed.select("e.key", "e.ts", "e.amount").where(
        F.col("key").isNotNull() & F.col("ts").isNotNull() & F.col("amount").isNotNull())
    return events.withColumn("day", utc_day(F.col("ts")))


def aggregate(events: DataFrame) -> DataFrame:
    """Per key per UTC day: (key, day, count, amount) with amount the exact sum."""
    return events.groupBy("key", "day").agg(F.count(F.lit(1)).alias("count"),
                                            F.sum("amount").alias("amount"))


def totals(aggregates: DataFrame) -> DataFrame:
    """Fold partial aggregates (e.g. one per streaming micro-batch) into one
    row per key and day."""
    return aggregates.groupBy("key", "day").agg(F.sum("count").alias("count"),
                                                F.sum("amount").alias("amount"))
