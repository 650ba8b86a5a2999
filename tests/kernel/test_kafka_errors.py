"""How kernel.kafka reads a client's errors: an ACL's refusal is known by its code, raised by confluent-kafka or
wrapped by `kafka_error` (the progress topic's creation used to look for "AUTHORIZATION" in the message text)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from failover.plan import select_groups
from kernel.errors import KafkaClientError
from kernel.kafka import already_exists, denied, kafka_error


def raised(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def test_a_refusal_by_an_acl_is_denied_raised_or_wrapped_and_nothing_else_is() -> None:
    for code in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    ):
        assert denied(raised(code))
        assert denied(kafka_error(raised(code), "creating topic 'mirrorwatch.progress'"))
    for code in (KafkaError.TOPIC_ALREADY_EXISTS, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT):
        assert not denied(raised(code))
        assert not denied(kafka_error(raised(code), "creating topic 'x'"))
    # the words alone are not a refusal: a topic may be named so
    assert not denied(KafkaClientError("creating topic 'AUTHORIZATION_FAILED': timed out", code="_TIMED_OUT"))
    assert not denied(RuntimeError("TOPIC_AUTHORIZATION_FAILED"))


def test_a_topic_that_exists_already_is_told_apart_from_a_refusal() -> None:
    assert already_exists(raised(KafkaError.TOPIC_ALREADY_EXISTS))
    assert not already_exists(raised(KafkaError.TOPIC_AUTHORIZATION_FAILED))


def test_a_request_without_an_answer_in_time_is_one_clear_retriable_error_not_a_traceback() -> None:
    """`failover plan` against a brand-new cluster under load (issue #67): the group listing's future gave up waiting
    and its bare TimeoutError ended the command with a traceback; it is a KafkaClientError, which the CLI says in a
    line (exit 1)."""

    class Silent:
        def list_consumer_groups(self, request_timeout: float) -> Future[object]:
            unanswered: Future[object] = Future()
            unanswered.set_exception(TimeoutError())  # what result(timeout=...) raises when it gives up
            return unanswered

    with pytest.raises(KafkaClientError) as raised:
        select_groups(Silent(), "target", ["billing"], None, set())  # type: ignore[arg-type]
    assert str(raised.value) == "listing consumer groups on target: no answer in time (try again)"
    assert raised.value.retriable and raised.value.code == "_TIMED_OUT"
