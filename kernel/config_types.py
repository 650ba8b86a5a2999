"""The value types of the config model (kernel.config): what the loader takes for each and how the JSON Schema
(`mirrorwatch config schema`) says so, so that an editor accepts what the loader accepts: client properties as text,
numbers or true/false; a byte rate as a number or text ("1MB", "800KiB/s"); a regex compiled at load time."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer, SecretStr, StringConstraints
from pydantic_core import PydanticCustomError

from kernel.byte_rate import parse_byte_rate
from kernel.patterns import PatternError, compile_pattern

__all__ = ["ByteRate", "Name", "Regex", "TopicName", "is_secret_property", "properties_validator"]

# A property is a secret when its name mentions a password, secret, token, credential or key material. Masking a
# harmless value (a key file's path) costs nothing; printing a real secret once is a security incident.
_SECRET_NAME = re.compile(
    r"password|passwd|secret|token|credential|jaas|keytab|keystore|truststore|private|oauthbearer\.config"
    r"|(^|[._-])key($|[._-])",
    re.IGNORECASE,
)


def is_secret_property(name: str) -> bool:
    """True when a client property of this name must never be printed."""
    return bool(_SECRET_NAME.search(name))


def _compile_regex(value: object) -> re.Pattern[str]:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError("regex_type", "a regex must be a string, got {value}", {"value": repr(value)})
    try:
        return compile_pattern(value)
    except PatternError as exc:
        words = "regex {pattern} is refused: {reason}" if exc.hazard else "invalid regex {pattern}: {reason}"
        raise PydanticCustomError("invalid_regex", words, {"pattern": repr(value), "reason": str(exc)}) from None


# A regex compiled at load time; written back as its source text.
Regex = Annotated[
    re.Pattern[str],
    BeforeValidator(_compile_regex),
    PlainSerializer(lambda p: p.pattern, return_type=str),
]

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=200)]
TopicName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+$", max_length=249)]


def _normalize_properties(value: object, reserved: Mapping[str, str]) -> object:
    """Client properties as librdkafka wants them (text), with secret-named values wrapped in `SecretStr`."""
    if isinstance(value, str):  # `properties: "sasl.password=..."`: never echoed, it may hold a secret
        raise PydanticCustomError(
            "properties_type", "must be a mapping of one `name: value` per line, not a string (its value not shown)"
        )
    if not isinstance(value, Mapping):
        return value  # pydantic reports the type error
    out: dict[str, object] = {}
    for name, raw in value.items():
        if name in reserved:
            raise PydanticCustomError("reserved_property", "{name}: {why}", {"name": name, "why": reserved[name]})
        if isinstance(raw, bool):  # YAML true/false; librdkafka wants "true"/"false"
            text: object = "true" if raw else "false"
        elif isinstance(raw, int | float):
            text = str(raw)
        elif isinstance(raw, SecretStr):
            text = raw.get_secret_value()
        elif isinstance(raw, str):
            text = raw
        else:
            raise PydanticCustomError(
                "properties_value",
                "{name}: must be text, a number or true/false, got {kind}",
                {"name": name, "kind": "nothing" if raw is None else f"a {type(raw).__name__}"},
            )
        out[str(name)] = SecretStr(text) if isinstance(text, str) and is_secret_property(str(name)) else text
    return out


def properties_validator(reserved: Mapping[str, str]) -> BeforeValidator:
    """For `Annotated[dict[str, str | SecretStr], ...]`: librdkafka (or Spark) properties, text, numbers or
    true/false in the file (the schema's input), text to the client; `reserved` names refused with their reason."""
    return BeforeValidator(
        lambda v: _normalize_properties(v, reserved), json_schema_input_type=dict[str, str | int | float | bool]
    )


def _byte_rate(value: object) -> int:
    try:
        return parse_byte_rate(value)
    except ValueError as exc:
        raise PydanticCustomError("byte_rate", str(exc)) from None


ByteRate = Annotated[int, BeforeValidator(_byte_rate, json_schema_input_type=int | str)]
