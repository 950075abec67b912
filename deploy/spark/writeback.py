"""Write the aggregates back to Kafka with Spark's Kafka sink.

Reads the Parquet of `backfill.py` (or of `streaming.py`: its per-batch rows
are folded into one per key and day) and produces one record per key and
day to ``--topic``: key ``<key>|<yyyy-mm-dd>``, value JSON
``{"key": ..., "day": "yyyy-mm-dd", "count": n, "amount": 12.34}``::

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 \\
        deploy/spark/writeback.py --bootstrap host:9092 --input /data/daily \\
        --topic daily-totals
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit): make `deploy.spark` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from deploy.spark import common  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="bootstrap servers, host:port[,...]")
    parser.add_argument("--input", required=True, help="Parquet aggregates to publish")
    parser.add_argument("--topic", required=True, help="output topic")
    common.add_client_args(parser)
    common.add_session_args(parser)
    return parser.parse_args(argv)


def as_records(aggregates: DataFrame) -> DataFrame:
    """(key, value) string columns, one row per key and day."""
    daily = common.totals(aggregates)
    day = F.date_format("day", "yyyy-MM-dd")
    return daily.select(
        F.concat_ws("|", "key", day).alias("key"),
        F.to_json(F.struct("key", day.alias("day"), "count", "amount")).alias("value"))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    (as_records(spark.read.parquet(args.input)).write.format("kafka")
     .option("kafka.bootstrap.servers", args.bootstrap)
     .option("topic", args.topic)
     .option("kafka.acks", "all")
     .options(**common.client_options(args))
     .save())


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    run(common.session_for(args, "tierd-writeback"), args)


if __name__ == "__main__":
    main()
