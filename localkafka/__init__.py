"""Apache Kafka on this machine: jars from Maven Central (the brokers', MirrorMaker 2's, Spark's Kafka connector),
local KRaft cluster pairs and their security material (TLS, SASL) for the demo, the tests and the benchmarks.

Imports: `kernel` only. The domains leave it alone but for `jars` (the spark engine's connector); the kernel never
needs it."""
