"""Prometheus recording and alerting rules (rules.py builds mirrorwatch.rules.yml; promtool tests in tests/)."""
