"""Whether the clusters let mirrorwatch in, asked once when a command starts.

A cluster that cannot be reached is retried by each command with a log line (it may come back). A cluster that
answers and refuses the client's credentials will not change its mind: a wrong password or SASL mechanism, an
untrusted or expired certificate. Every command that talks to clusters asks each of its clusters once, in parallel,
before anything else, and stops at once on a refusal with one line per cluster and exit 1, never a retry loop that
hides it:

    mirrorwatch: error: 1 cluster refused mirrorwatch's client settings:
    source (127.0.0.1:9093): SASL authentication (SCRAM-SHA-512 as 'mirrorwatch') failed: Authentication failed ...

What a refusal says comes from librdkafka's error (its reason, never the properties' values), and what was tried
(mechanism and user, the CA file) from the cluster's settings, never a secret.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kernel.config import ROLES, ClusterConfig, MirrorwatchConfig, Role, reveal
from kernel.errors import MirrorwatchError
from kernel.kafka import new_admin

__all__ = ["ClusterRefusedError", "Refusal", "refusal", "require_access", "sasl_principal"]

PROBE_BUDGET_S = 10.0
# librdkafka's codes for a connection that was refused for its credentials, not lost.
_AUTHENTICATION = KafkaError._AUTHENTICATION
_SSL = KafkaError._SSL
# librdkafka's codes for a cluster that is not there (yet): the command's own retries deal with it.
_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}


@dataclass(frozen=True)
class Refusal:
    """A cluster that answered and would not let the client in."""

    alias: str
    bootstrap_servers: str
    attempt: str  # what the client tried, e.g. "SASL authentication (SCRAM-SHA-512 as 'mirrorwatch')"
    reason: str  # librdkafka's words

    def __str__(self) -> str:
        return f"{self.alias} ({self.bootstrap_servers}): {self.attempt} failed: {self.reason}"


class ClusterRefusedError(MirrorwatchError):
    """One or more clusters refused the client's credentials (exit 1)."""

    def __init__(self, refusals: list[Refusal]) -> None:
        self.refusals = refusals
        count = f"{len(refusals)} cluster{'s' if len(refusals) != 1 else ''}"
        super().__init__(f"{count} refused mirrorwatch's client settings:\n" + "\n".join(map(str, refusals)))


def sasl_principal(properties: dict[str, str]) -> str | None:
    """Who SASL client settings (secrets revealed or not) say they are: `sasl.username`; for OAUTHBEARER the
    principal of librdkafka's unsecured token (`principal=` in sasl.oauthbearer.config) or the OIDC client id. The
    broker's principal is the token's `sub` claim: the client id for the local provider's tokens (and Okta's), an
    object id for Keycloak's and Entra's unless the brokers name another claim (`sasl.oauthbearer.sub.claim.name`)."""
    if "sasl.username" in properties:
        return properties["sasl.username"]
    unsecured = re.search(r"(?:^|\s)principal=(\S+)", properties.get("sasl.oauthbearer.config", ""))
    if unsecured is not None and properties.get("enable.sasl.oauthbearer.unsecure.jwt", "").lower() == "true":
        return unsecured.group(1)
    return properties.get("sasl.oauthbearer.client.id")


def _attempt(cluster: ClusterConfig, code: int) -> str:
    properties = reveal(cluster.properties)
    if code == _AUTHENTICATION:
        mechanism = properties.get("sasl.mechanism", properties.get("sasl.mechanisms", "GSSAPI"))
        user = sasl_principal(properties)
        return f"SASL authentication ({mechanism}{f' as {user!r}' if user else ''})"
    trust = properties.get("ssl.ca.location")
    certificate = "ssl.certificate.location" in properties or "ssl.certificate.pem" in properties
    what = ", ".join(
        [
            *([f"trusting {trust}"] if trust else ["trusting the system's CAs"]),
            *(["with a client certificate"] * certificate),
        ]
    )
    return f"the TLS handshake ({what})"


_BROKER_PREFIX = re.compile(r"^\w+://\S+: ")  # sasl_ssl://127.0.0.1:9093/bootstrap: (the line says the cluster)
_STATE_SUFFIX = re.compile(r"\s*\(after \d+ms in state \w+\)$")


def _reason(text: str) -> str:
    return _STATE_SUFFIX.sub("", _BROKER_PREFIX.sub("", text))


def _refused(error: KafkaError) -> int | None:
    """_AUTHENTICATION or _SSL when the error is the cluster refusing the client, else None. Under TLS 1.3 a
    broker refuses a client certificate after the client's side of the handshake is done, so its alert arrives as a
    transport error naming the alert."""
    code = error.code()
    if code in (_AUTHENTICATION, _SSL):
        return int(code)
    text = error.str().lower()
    if code == KafkaError._TRANSPORT and "ssl" in text and " alert " in text:
        return int(_SSL)
    return None


def refusal(cluster: ClusterConfig, alias: str, budget_s: float = PROBE_BUDGET_S) -> Refusal | None:
    """Ask the cluster for its metadata once: the refusal when it would not let the client in; None when it answered,
    or could not be reached (yet) within `budget_s`."""
    errors: list[KafkaError] = []
    lock = threading.Lock()

    def on_error(error: KafkaError) -> None:
        with lock:
            errors.append(error)

    overrides: dict[str, Any] = {"error_cb": on_error, "log_level": 0}  # the refusal says it, once
    admin = new_admin(cluster, alias, overrides)
    deadline = time.monotonic() + budget_s
    while True:
        try:
            admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            return None
        except KafkaException:
            admin.poll(0.2)  # serves error_cb
        with lock:
            seen = list(errors)
        for error in seen:
            kind = _refused(error)
            if kind is not None:
                return Refusal(alias, cluster.bootstrap_servers, _attempt(cluster, kind), _reason(error.str()))
        if any(error.code() in _UNREACHABLE for error in seen) or time.monotonic() >= deadline:
            return None


def require_access(config: MirrorwatchConfig, aliases: Iterable[str], roles: Iterable[Role] = ROLES) -> None:
    """Ask each of these clusters in parallel, as each of `roles` connects to it (`clusters.X.clients.<role>`; the
    same settings are asked once); raise ClusterRefusedError naming every cluster that refused."""
    probes: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, ClusterConfig]] = {}
    for alias in dict.fromkeys(aliases):
        cluster = config.clusters[alias]
        for role in roles:
            as_role = cluster.as_client(role)
            key = (alias, tuple(sorted(as_role.client_properties().items())))
            probes.setdefault(key, (alias if not cluster.clients else f"{alias} as {role}", as_role))
    found: dict[str, Refusal | None] = {}

    def probe(label: str, cluster: ClusterConfig) -> None:
        found[label] = refusal(cluster, label)

    threads = [threading.Thread(target=probe, args=p, name=f"access-{p[0]}", daemon=True) for p in probes.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    refusals = [r for label, _ in probes.values() if (r := found.get(label)) is not None]
    if refusals:
        raise ClusterRefusedError(refusals)
