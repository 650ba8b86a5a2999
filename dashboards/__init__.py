"""Grafana dashboards as code (grafana.py -> grafana/*.json) and the Streamlit ops console."""
