"""The canary: probes through the mirror, read back at the target (pure core: probe, tracker, topic).

Imports: `kernel` only; no other domain."""
