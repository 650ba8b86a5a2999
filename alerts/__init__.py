"""Prometheus recording and alerting rules (rules.py builds mirrorwatch.rules.yml; promtool tests in tests/).

Imports: `kernel` only (its alert thresholds); no other domain."""
