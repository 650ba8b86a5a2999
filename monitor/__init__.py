"""The monitor: collector (Kafka I/O -> snapshot), offset windows, evaluator (pure rules), HTTP API, exporter.

Imports: `kernel` only; no other domain."""
