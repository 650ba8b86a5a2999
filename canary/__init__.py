"""The canary: probes through the mirror, read back at the target (pure core: probe, tracker, topic)."""
