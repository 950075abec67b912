"""Scenario scripts run against a three-broker tierd cluster.

Each scenario is ``python -m deploy.scenarios.<name>`` with either
``--launcher STATE_FILE`` (a cluster started by ``python -m deploy.launcher``)
or ``--compose-file F [--compose-file F ...] --project P --bootstrap H:P,H:P,H:P``
(a docker-compose cluster). It prints ``check: <what> ... ok`` or
``... FAIL: <why>`` per check, then ``VERDICT: PASS`` (exit 0) or
``VERDICT: FAIL`` (exit 1).

* ``kill_leader``: SIGKILL a partition leader under acks=all; no acknowledged
  record is lost or duplicated; the broker rejoins the ISR.
* ``wipe_rebuild``: wipe a follower of a tiered topic; it rebuilds from the
  remote tier (not from offset 0) and rejoins the ISR.
* ``s3_outage``: pause the S3 store; produce and local reads continue, the
  copy lag grows, then drains once the store is back.
"""
