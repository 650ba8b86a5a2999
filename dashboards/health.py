"""How the console says a link's health and a figure (pure: no Streamlit, no network)."""

from __future__ import annotations

from typing import Any

__all__ = ["canary_of", "lag_seconds", "link_health", "seconds", "worst"]


def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def lag_seconds(link: dict[str, Any]) -> str:
    """The link's replication lag in seconds as said: "at least" before a lower bound (the source stopped answering
    before its oldest waiting record was dated, issue #67)."""
    said = seconds(link.get("replication_lag_seconds"))
    return f"at least {said}" if link.get("replication_lag_seconds_at_least") else said


def link_health(link: dict[str, Any]) -> str:
    """The link's health as Streamlit markdown: a word in colour (red, orange, green, blue, gray) and what it means,
    readable in any browser (emoji need a font a headless or minimal one may lack: issue #67)."""
    if link.get("failure"):
        return ":red[**failed**]"
    if link.get("state") == "workers gone":
        gone = link.get("workers_gone", 0)
        return f":red[**down**]: {gone} worker(s) dead or frozen, lag measured from their last acknowledged positions"
    if not link.get("engine_running"):
        # no worker mirrors it: records wait (MirrorwatchMirrorDown fires after 2 min), crashed or stopped alike
        return ":red[**not running**]: no worker mirrors it (positions from the group's commits)"
    if link.get("state") == "paused":
        return ":blue[**paused**] by an operator: copies nothing, its lag grows (mirrorwatch link status | resume)"
    lag_s = link.get("replication_lag_seconds")
    if lag_s is None:
        return f":gray[**running**], lag in seconds not known: {link.get('reason') or 'not measured yet'}"
    if link.get("replication_lag_seconds_at_least"):  # a floor: the reason says why (the source is not answering)
        return f":orange[**lagging**], {lag_seconds(link)} behind: {link.get('reason') or 'the source is not seen'}"
    return ":green[**healthy**]" if lag_s < 60 else ":orange[**lagging**]"


def canary_of(canary: dict[str, Any] | None, link: str) -> dict[str, Any] | None:
    for entry in (canary or {}).get("links", []):
        if entry["link"] == link:
            return dict(entry)
    return None


def worst(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None
