"""``tierd admin``: the operator's command line.

It speaks the Kafka protocol to any broker (bootstrap servers) and, for the
remote tier's bookkeeping (reconcile, rebuild-metadata), the object store
directly with the broker's own storage configuration. One module per
subcommand family; ``cli`` wires them into one argparse tree.
"""
