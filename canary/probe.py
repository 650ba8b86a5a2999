"""The probe: one canary message, and its wire format (pure).

A probe's value is 44 bytes followed by the link name in UTF-8, all integers big-endian:

    offset  size  field
    0       4     magic b"MWCP"
    4       1     format version (1)
    5       3     reserved, zero
    8       16    instance id (a UUID, new each time a canary starts)
    24      4     source partition the probe was produced to
    28      8     sequence number, per (instance, link, partition), from 0
    36      8     creation time, nanoseconds since the epoch
    44      ...   link name

Its key is `<link>/<partition>` (so a compacted or keyed view stays readable) and it carries the headers
`mirrorwatch.canary: 1` and `mirrorwatch.canary.instance: <uuid hex>`, so tools can tell probes apart without
decoding the value. Anything else in the topic (another version, another tool) decodes to None and is ignored.

With a signing key (`canary.signing_key`) a probe also carries `mirrorwatch.canary.signature`: the HMAC-SHA256 of
its value under that key (the mirror copies headers as they are). A canary with a key counts only probes whose
signature is right: the instance id is public at /canary, so without one, whoever can write the probe topic can
imitate a probe of a sequence handed out (a forged duplicate, or an arrival before the real one).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["HEADER_INSTANCE", "HEADER_MARK", "HEADER_SIGNATURE", "Probe", "decode_probe", "is_signed", "signature"]

MAGIC = b"MWCP"
VERSION = 1
_LAYOUT = struct.Struct(">4sB3x16siqq")  # magic, version, pad, instance, partition, sequence, created_ns
HEADER_MARK = "mirrorwatch.canary"
HEADER_INSTANCE = "mirrorwatch.canary.instance"
HEADER_SIGNATURE = "mirrorwatch.canary.signature"


@dataclass(frozen=True)
class Probe:
    instance: str  # uuid hex
    link: str
    partition: int  # the source partition it was produced to
    sequence: int
    created_ns: int

    def key(self) -> bytes:
        return f"{self.link}/{self.partition}".encode()

    def value(self) -> bytes:
        head = _LAYOUT.pack(
            MAGIC, VERSION, uuid.UUID(hex=self.instance).bytes, self.partition, self.sequence, self.created_ns
        )
        return head + self.link.encode()

    def headers(self, key: bytes | None = None) -> list[tuple[str, str | bytes | None]]:
        """The probe's headers; with a signing key, its signature too."""
        headers: list[tuple[str, str | bytes | None]] = [
            (HEADER_MARK, str(VERSION).encode()),
            (HEADER_INSTANCE, self.instance.encode()),
        ]
        if key is not None:
            headers.append((HEADER_SIGNATURE, signature(self.value(), key)))
        return headers


def signature(value: bytes, key: bytes) -> bytes:
    return hmac.new(key, value, hashlib.sha256).digest()


def is_signed(value: bytes | None, headers: Sequence[tuple[str, str | bytes | None]] | None, key: bytes) -> bool:
    """The record carries a signature header that is right for its value under `key` (compared in constant time)."""
    if value is None or not headers:
        return False
    expected = signature(value, key)
    return any(
        name == HEADER_SIGNATURE and isinstance(got, bytes) and hmac.compare_digest(got, expected)
        for name, got in headers
    )


def decode_probe(value: bytes | None) -> Probe | None:
    """The probe in a record's value, or None for anything that is not a probe of this format."""
    if value is None or len(value) < _LAYOUT.size or not value.startswith(MAGIC):
        return None
    magic, version, instance, partition, sequence, created_ns = _LAYOUT.unpack_from(value)
    if magic != MAGIC or version != VERSION:
        return None
    try:
        link = value[_LAYOUT.size :].decode()
    except UnicodeDecodeError:
        return None
    if not link:
        return None
    return Probe(uuid.UUID(bytes=instance).hex, link, partition, sequence, created_ns)
