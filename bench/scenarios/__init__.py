"""Built-in scenarios; importing this package registers them in order.

To add one, write ``bench/scenarios/<name>.py`` that calls
:func:`bench.registry.register` at import time and import it here.
"""

from bench.scenarios import (
    cluster,
    compaction,
    e2e_latency,
    groups,
    isolation,
    rebuild,
    remote_codec,
    scale,
    spark,
    throughput,
    tiered,
    tls,
    zero_copy,
)

__all__ = ["throughput", "e2e_latency", "groups", "isolation", "tiered", "cluster", "rebuild",
           "remote_codec", "scale", "spark", "zero_copy", "compaction", "tls"]
