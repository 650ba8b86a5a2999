"""B7: /metrics at scale — series, bytes and scrape time with 1,000 consumer groups on the real local cluster.

    .venv/bin/python -m bench.exporter_scale                         # 1,000 groups x 12 partitions
    .venv/bin/python -m bench.exporter_scale --groups 100 --scrapes 5   # a quick look

G consumer groups commit on the 12 partitions of one topic (every tenth lags by 10 records), the monitor collects the
cluster twice as it does each interval, and a real HTTP server (the monitor's own) serves its state. Measured in the
same run, over real HTTP:

- `rendered per collection` (how /metrics works now): the first scrape after a collection renders the families once
  (`render`), every other scrape of that collection is served from the bytes (`scrape`);
- `rendered per scrape` (how it worked before, the peer): every scrape renders every family again;
- the series and bytes per exporter style (`monitor.compatible_metrics`), and with mirrorwatch's own families only.

Prometheus' default scrape timeout is 10 s; a scrape that renders per request grows with groups x partitions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.common import clusters_for, exit_on_sigterm, load_groups, markdown_table, median
from kernel.config import ClusterConfig, MonitorConfig
from kernel.kafka import new_admin
from monitor.exporter import STYLES, MonitorCollector
from monitor.http import HttpServer, create_app
from monitor.service import MonitorService

PARTITIONS = 12
RECORDS_PER_PARTITION = 100


def _unload(source: ClusterConfig, topic: str, groups: int) -> None:
    admin = new_admin(source, "source")
    for future in admin.delete_consumer_groups([f"{topic}-{g}" for g in range(groups)]).values():
        future.exception(timeout=60)
    if topic in admin.list_topics(timeout=30).topics:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)


def _get(url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body: bytes = response.read()
    return time.perf_counter() - started, body


def _series(text: bytes, names: tuple[str, ...] | None = None) -> int:
    count = 0
    for line in text.splitlines():
        if not line or line.startswith(b"#"):
            continue
        name = line.split(b"{", 1)[0].split(b" ", 1)[0].decode()
        if names is None or name.removesuffix("_total") in names or name in names:
            count += 1
    return count


def measure(service: MonitorService, scrapes: int) -> dict[str, Any]:
    collector = MonitorCollector(service)

    async def rendered_per_scrape(request: Request) -> Response:  # the peer: a rendering per scrape
        return Response(collector.render(), media_type=CONTENT_TYPE_LATEST)

    app = create_app(service, extra_routes=[Route("/metrics-per-scrape", rendered_per_scrape)])
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        state = service.state
        assert state is not None
        renders, cached, peer = [], [], []
        body = b""
        for _ in range(scrapes):
            service.state = dataclasses.replace(state)  # a new collection: the next scrape renders
            seconds, body = _get(f"{base}/metrics")
            renders.append(seconds)
            cached.append(_get(f"{base}/metrics")[0])
            peer.append(_get(f"{base}/metrics-per-scrape")[0])
        per_style = {style: _series(body, names) for style, names in STYLES.items()}
        service.settings = service.settings.model_copy(update={"compatible_metrics": ()})
        service.state = dataclasses.replace(state)
        own_seconds, own_body = _get(f"{base}/metrics")
    finally:
        server.stop()
    return {
        "series": _series(body),
        "bytes": len(body),
        "series_per_style": per_style,
        "render_seconds": median(renders),
        "scrape_seconds": median(cached),
        "per_scrape_seconds": median(peer),
        "own_only": {"series": _series(own_body), "bytes": len(own_body), "render_seconds": own_seconds},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1_000, help="consumer groups [1000]")
    parser.add_argument("--scrapes", type=int, default=10, help="scrapes per way of serving [10]")
    parser.add_argument("--clusters", type=Path, help="state dir of clusters already up (else started and stopped)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="mirrorwatch-bench-") as tmp,
        clusters_for(args.clusters, Path(tmp)) as config,
    ):
        source = config.clusters["source"]
        topic = f"bench.exporter.{int(time.time())}"
        service = MonitorService(MonitorConfig(interval_seconds=10), {"source": source})
        try:
            load_groups(source, topic, args.groups, PARTITIONS, RECORDS_PER_PARTITION)
            service.collect()
            time.sleep(1)
            state = service.collect()  # two observations per group-partition, as after one interval
            groups = sum(1 for (_alias, group) in state.groups if group.startswith(topic))
            result = {"groups": args.groups, "groups_collected": groups, **measure(service, args.scrapes)}
        finally:
            service.stop()
            _unload(source, topic, args.groups)
    print(
        markdown_table(
            ["/metrics", "series", "MB", "first scrape after a collection", "other scrapes"],
            [
                [
                    "rendered per collection (now)",
                    f"{result['series']:,}",
                    f"{result['bytes'] / 1e6:.1f}",
                    f"{result['render_seconds']:.2f} s",
                    f"{result['scrape_seconds'] * 1000:.0f} ms",
                ],
                [
                    "rendered per scrape (before)",
                    f"{result['series']:,}",
                    f"{result['bytes'] / 1e6:.1f}",
                    f"{result['per_scrape_seconds']:.2f} s",
                    f"{result['per_scrape_seconds']:.2f} s",
                ],
                [
                    "mirrorwatch's own families only",
                    f"{result['own_only']['series']:,}",
                    f"{result['own_only']['bytes'] / 1e6:.2f}",
                    f"{result['own_only']['render_seconds']:.2f} s",
                    "",
                ],
            ],
        )
    )
    print(
        f"{result['groups_collected']:,} of {result['groups']:,} groups x {PARTITIONS} partitions; series per style: "
        + ", ".join(f"{style} {count:,}" for style, count in result["series_per_style"].items())
        + f"; scrape served from bytes {result['per_scrape_seconds'] / max(result['scrape_seconds'], 1e-9):.0f}x "
        "faster than rendering per scrape"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["groups_collected"] == result["groups"] else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
