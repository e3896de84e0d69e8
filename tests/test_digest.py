"""kernelpolicy.digest: the cold-start SHA-256 and HMAC give the standard library's digests."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from kernelpolicy.digest import hmac_sha256, sha256

MESSAGES = {
    "empty": b"",
    "short": b"abc",
    "app-id": bytes.fromhex("6b70c0a7e1b94f5c9d3f2a8e4b1d7c60"),
    "one-block": b"x" * 64,
    "several-blocks": bytes(range(256)) * 3,
}

KEYS = {
    "empty": b"",
    "machine-id": bytes.fromhex("0123456789abcdef0123456789abcdef"),
    "block-long": b"k" * 64,  # used as it is, padded by nothing
    "longer-than-a-block": b"K" * 65,  # hashed first (RFC 2104)
    "high-bytes": bytes(range(255, 155, -1)),
}


@pytest.mark.parametrize("message", MESSAGES.values(), ids=MESSAGES.keys())
def test_sha256_matches_hashlib(message: bytes) -> None:
    ours = sha256(message)
    assert ours.digest() == hashlib.sha256(message).digest()
    assert ours.hexdigest() == hashlib.sha256(message).hexdigest()


@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
@pytest.mark.parametrize("message", MESSAGES.values(), ids=MESSAGES.keys())
def test_hmac_sha256_matches_hmac(key: bytes, message: bytes) -> None:
    assert hmac_sha256(key, message) == hmac.new(key, message, "sha256").hexdigest()


def test_hmac_sha256_rfc4231_case_2() -> None:
    """RFC 4231's test case 2 (key "Jefe"), the published value."""
    assert hmac_sha256(b"Jefe", b"what do ya want for nothing?") == (
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )
