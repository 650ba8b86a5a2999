"""Failover: exact consumer-offset translation by provenance (pure core), target scans, plan, apply and verify.

Imports: `kernel` only; no other domain."""
