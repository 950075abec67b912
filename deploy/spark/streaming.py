"""Incremental aggregation: the backfill's per key per UTC day aggregation as a
Structured Streaming query with ``trigger(availableNow=True)``.

Each run processes what arrived since the previous run (the checkpoint holds
the Kafka offsets) and stops. Micro-batch N's aggregates go to
``<out>/batch_id=N/`` (overwritten if Spark replays that batch after a crash,
so output is exactly once). Per key and day totals are the sums over batches
(`deploy.spark.common.totals`)::

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 \\
        deploy/spark/streaming.py --bootstrap host:9092 --topic events \\
        --out /data/daily-incremental --checkpoint /data/checkpoints/daily
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (spark-submit): make `deploy.spark` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from deploy.spark import common  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_kafka_args(parser, batch=False)
    parser.add_argument("--out", required=True, help="Parquet output, one directory per batch")
    parser.add_argument("--checkpoint", required=True, help="checkpoint location (keep it)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None,
                        help="split a run's backlog into batches of at most this many records")
    return parser.parse_args(argv)


def batch_writer(out: str) -> Any:
    """The foreachBatch function: aggregate one micro-batch into its own directory."""

    def write(batch: DataFrame, batch_id: int) -> None:
        common.aggregate(batch).write.mode("overwrite").parquet(f"{out}/batch_id={batch_id}")

    return write


def run(spark: SparkSession, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Process everything available, then stop.

    Returns:
        One entry per micro-batch of this run: {"batchId", "numInputRows"}
        (numInputRows counts Kafka records read, malformed ones included).
    """
    options = common.kafka_source_options(args)
    if args.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
    raw = spark.readStream.format("kafka").options(**options).load()
    query = (common.parse_events(raw).writeStream
             .foreachBatch(batch_writer(args.out))
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    return [{"batchId": p["batchId"], "numInputRows": p["numInputRows"]}
            for p in query.recentProgress if p["numInputRows"] > 0]


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    run(common.session_for(args, "tierd-streaming"), args)


if __name__ == "__main__":
    main()
