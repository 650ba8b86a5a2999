"""The mirror engine: rename policy, topic planner, offset progress, the python engine, MirrorMaker 1 compatibility.

Imports: `kernel`, and `localkafka.jars` for the spark engine's Kafka connector; no other domain."""
