"""Batch backfill: a (tiered) topic from earliest to latest through Spark's
Kafka source, aggregated per key per UTC day, written as Parquet.

Old offsets of a tiered topic are served from the remote tier transparently,
so this reads the whole history whether or not it is still on local disk::

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 \\
        deploy/spark/backfill.py --bootstrap host:9092 --topic events --out /data/daily

Output columns: key (string), day (date), count (long), amount (decimal).
The output directory is replaced.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit): make `deploy.spark` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from deploy.spark import common  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_kafka_args(parser, batch=True)
    parser.add_argument("--out", required=True, help="Parquet output directory (replaced)")
    return parser.parse_args(argv)


def daily_aggregates(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The aggregation over [starting, ending) offsets of the topic, not yet written."""
    raw = spark.read.format("kafka").options(**common.kafka_source_options(args)).load()
    return common.aggregate(common.parse_events(raw))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    daily_aggregates(spark, args).write.mode("overwrite").parquet(args.out)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    run(common.session_for(args, "tierd-backfill"), args)


if __name__ == "__main__":
    main()
