"""deploy/helm/mirrorwatch: the chart linted by helm, rendered for its default values and for a secured fleet of two
links, every rendered object checked against Kubernetes' own API types (deploy/helm/check, built by setup: decoded
strictly, unknown fields refused, then selectors, ports, volumes and ConfigMaps tied together), and what the objects
carry checked against the sources they come from: the config mirrorwatch loads, the alert rules, the dashboards
(issue #68). No Kubernetes cluster is needed."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel.config import parse_config

CHECKOUT = Path(__file__).resolve().parents[2]
CHART = CHECKOUT / "deploy" / "helm" / "mirrorwatch"
SECURED = CHART / "examples" / "secured-multilink.yaml"
TOOLS = CHECKOUT / ".tools" / "bin"


def helm(*args: str | Path) -> str:
    done = subprocess.run([TOOLS / "helm", *map(str, args)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"helm {' '.join(map(str, args))}: {done.stdout}{done.stderr}"
    return done.stdout


def render(*values: str | Path) -> str:
    return helm("template", "mw", CHART, "--namespace", "kafka", *values)


def manifestcheck(manifests: str) -> tuple[int, str]:
    done = subprocess.run([TOOLS / "manifestcheck"], input=manifests, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def objects(manifests: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(manifests) if o}


@pytest.fixture(scope="module")
def default() -> str:
    return render()


@pytest.fixture(scope="module")
def secured() -> str:
    return render("-f", SECURED)


@pytest.mark.parametrize("values", [[], ["-f", SECURED]], ids=["default", "secured-multilink"])
def test_helm_lints_the_chart_without_a_warning(values: list[str | Path]) -> None:
    said = helm("lint", "--strict", CHART, *values)
    assert "1 chart(s) linted, 0 chart(s) failed" in said
    assert "[WARNING]" not in said and "[ERROR]" not in said


def test_every_rendered_object_is_what_the_kubernetes_api_accepts(default: str, secured: str) -> None:
    for manifests in (default, secured):
        code, said = manifestcheck(manifests)
        assert code == 0, said
        assert said.startswith("ok: ")
    kinds = sorted(kind for kind, _ in objects(secured))
    assert kinds.count("Deployment") == 4  # two links' workers, the monitor, the canary
    assert {"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "ServiceAccount", "Service"} <= set(kinds)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # a misspelt field in a template: Kubernetes would refuse the Deployment
        (
            lambda m: m.replace("containerPort:", "containerPorts:", 1),
            'unknown field "spec.template.spec.containers[0].ports[0].containerPorts"',
        ),
        # a Service whose selector selects nothing: accepted by the API, but serves no pod
        (
            lambda m: m.replace(
                "    app.kubernetes.io/component: monitor\n  ports:",
                "    app.kubernetes.io/component: monitr\n  ports:",
            ),
            "Service/mw-mirrorwatch-monitor: its selector selects no Deployment's pods",
        ),
    ],
    ids=["unknown-field", "selector-selects-nothing"],
)
def test_a_rendered_object_kubernetes_would_refuse_or_never_serve_fails_the_check(
    default: str, change: Any, said: str
) -> None:
    changed = change(default)
    assert changed != default
    code, out = manifestcheck(changed)
    assert code == 1 and said in out, out


def test_a_value_of_the_wrong_type_renders_an_object_the_check_refuses() -> None:
    code, out = manifestcheck(render("--set", "http.port=http"))
    assert code == 1
    assert "Deployment/mw-mirrorwatch-monitor" in out and "containerPort" in out, out


def test_each_link_gets_its_workers_and_the_config_is_one_mirrorwatch_loads(secured: str) -> None:
    rendered = objects(secured)
    config_text = rendered[("ConfigMap", "mw-mirrorwatch-config")]["data"]["mirrorwatch.yaml"]
    env = {
        "KAFKA_EAST_PASSWORD": "e",
        "KAFKA_WEST_PASSWORD": "w",
        "KAFKA_HUB_PASSWORD": "h",
        "MIRRORWATCH_CANARY_KEY": "k" * 32,
    }
    config = parse_config(yaml.safe_load(config_text), source="ConfigMap", env=env)
    assert (config.http.host, config.http.port) == ("0.0.0.0", 8000)  # reachable by the Service and the probes
    assert str(config.http.web_config_file) == "/etc/mirrorwatch/web/web.yml"
    assert "${KAFKA_HUB_PASSWORD}" in config_text  # the secret stays in the Secret, read from the environment

    workers = {
        o["metadata"]["labels"]["mirrorwatch.io/link"]: o
        for (kind, _), o in rendered.items()
        if kind == "Deployment" and "mirrorwatch.io/link" in o["metadata"]["labels"]
    }
    assert sorted(workers) == sorted(link.name for link in config.links)
    assert {name: d["spec"]["replicas"] for name, d in workers.items()} == {"east_to_hub": 3, "west.to.hub": 1}
    for name, deployment in workers.items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"] == ["mirror", "--config", "/etc/mirrorwatch/mirrorwatch.yaml", "--link", name]
        assert [e["secretRef"]["name"] for e in container["envFrom"]] == ["mirrorwatch-kafka", "mirrorwatch-canary"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["terminationGracePeriodSeconds"] == 90  # time to deliver and commit what is in flight


def test_probes_follow_the_web_config(default: str, secured: str) -> None:
    plain = objects(default)[("Deployment", "mw-mirrorwatch-monitor")]["spec"]["template"]["spec"]["containers"][0]
    assert plain["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTP"}
    assert plain["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTP"}
    # behind basic auth every path answers 401 without credentials, which a probe cannot send
    guarded = objects(secured)[("Deployment", "mw-mirrorwatch-canary")]["spec"]["template"]["spec"]["containers"][0]
    assert guarded["readinessProbe"] == {**guarded["readinessProbe"], "tcpSocket": {"port": "http"}}
    assert "httpGet" not in guarded["readinessProbe"]
    endpoint = objects(secured)[("ServiceMonitor", "mw-mirrorwatch")]["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["basicAuth"]["password"]["name"] == "mirrorwatch-scrape"


def test_the_rules_and_dashboards_are_the_repositorys_own(default: str) -> None:
    rendered = objects(default)
    rules = yaml.safe_load((CHECKOUT / "alerts" / "mirrorwatch.rules.yml").read_text())
    assert rendered[("PrometheusRule", "mw-mirrorwatch")]["spec"]["groups"] == rules["groups"]
    dashboards = sorted((CHECKOUT / "dashboards" / "grafana").glob("*.json"))
    assert dashboards
    for path in dashboards:
        configmap = rendered[("ConfigMap", f"mw-mirrorwatch-dashboard-{path.stem}")]
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(configmap["data"][path.name]) == json.loads(path.read_text())


def leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    """The paths of values.yaml's values: a mapping is descended, anything else is a value."""
    found = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        found += leaves(value, f"{path}.") if isinstance(value, dict) and value else [path]
    return found


def test_the_charts_readme_documents_every_value_and_no_other() -> None:
    documented = re.findall(r"^\| `([\w.]+)` \|", (CHART / "README.md").read_text(), flags=re.MULTILINE)
    paths = leaves(yaml.safe_load((CHART / "values.yaml").read_text()))
    undocumented = [p for p in paths if not any(p == d or p.startswith(f"{d}.") for d in documented)]
    assert undocumented == []
    stale = [d for d in documented if not any(p == d or p.startswith(f"{d}.") for p in paths)]
    assert stale == []
