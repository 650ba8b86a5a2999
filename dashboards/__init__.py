"""Grafana dashboards as code (grafana.py -> grafana/*.json) and the Streamlit ops console.

Imports: `kernel` at most (the console reads the monitor over its HTTP API); no other domain."""
