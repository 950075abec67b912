"""Benchmark harness comparing tierd with Tansu on the Kafka wire protocol.

Run with ``python -m bench`` (``make bench``); see ``bench/README.md``.
"""
