"""The SparkSession every job of the pipeline runs in.

Where the Kafka connector comes from:

* under ``spark-submit``: from its ``--packages
  org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0`` (or ``--jars``). The
  driver JVM is already running when Python starts, so jars named later
  would not reach the driver's data source lookup; none are added.
* a plain ``python deploy/spark/backfill.py`` or a test (Python starts the
  JVM): ``--jars`` (comma separated), else ``$TIERD_SPARK_JARS``, else every
  jar in ``.deps/spark-jars/`` (filled by ``scripts/install-deps.sh``: the
  connector, its token provider, kafka-clients 3.9.0 and commons-pool2).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

# scripts/install-deps.sh links the connector's jars here.
DEFAULT_JARS_DIR = Path(__file__).resolve().parents[2] / ".deps" / "spark-jars"
JARS_ENV = "TIERD_SPARK_JARS"

# Settings every job wants. Days are UTC whatever the machine's zone; a
# handful of shuffle partitions suits per-key-per-day aggregates (Spark's
# default of 200 makes tiny jobs slow).
BASE_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
}


# Set by spark-submit for the Python driver it starts (the JVM is up already).
SUBMIT_GATEWAY_ENV = "PYSPARK_GATEWAY_PORT"


def default_jars() -> list[str]:
    """Jars from ``$TIERD_SPARK_JARS`` or ``.deps/spark-jars/``; empty if
    neither, or under spark-submit."""
    if SUBMIT_GATEWAY_ENV in os.environ:
        return []
    from_env = os.environ.get(JARS_ENV, "")
    if from_env:
        return [j for j in from_env.split(",") if j]
    if DEFAULT_JARS_DIR.is_dir():
        return sorted(str(p) for p in DEFAULT_JARS_DIR.glob("*.jar"))
    return []


def build_session(app_name: str, *, master: str | None = None,
                  jars: Sequence[str] | None = None,
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """Get (or create) the SparkSession.

    Args:
        app_name: shown in the Spark UI and logs.
        master: e.g. ``local[2]``; None leaves it to spark-submit (``local[*]``
            when run with plain python).
        jars: jars to add to the classpath; None means `default_jars()`.
        conf: extra Spark settings, applied over `BASE_CONF`.
    """
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    chosen = default_jars() if jars is None else list(jars)
    if chosen:
        builder = builder.config("spark.jars", ",".join(chosen))
    for key, value in {**BASE_CONF, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
