"""How kernel.kafka reads a client's errors: an ACL's refusal is known by its code, raised by confluent-kafka or
wrapped by `kafka_error` (the progress topic's creation used to look for "AUTHORIZATION" in the message text)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

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
