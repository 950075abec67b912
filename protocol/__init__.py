"""Kafka wire protocol for tierd: pure functions over bytes (no sockets, files or clocks).

Request and response codecs come from kafka-python's schema-generated
``kafka.protocol`` classes; this package adds framing, the API table we
advertise, record-batch (magic v2) handling and the error-code enum.
"""
