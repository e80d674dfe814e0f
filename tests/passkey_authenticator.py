"""A software WebAuthn authenticator for tests without a browser: real P-256 keys, real CBOR,
the same JSON a browser posts (static/passkeys.js), so the server's checks run unchanged.
Browser tests use Chromium's virtual authenticator instead (tests/browser/test_passkeys_browser.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

UP, UV, AT = 0x01, 0x04, 0x40  # user present, user verified, attested credential data


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Credential:
    id: bytes
    key: ec.EllipticCurvePrivateKey
    rp_id: str
    user_handle: bytes
    sign_count: int = 0


@dataclass
class SoftAuthenticator:
    credentials: list[Credential] = field(default_factory=list)

    def create(self, options: dict[str, Any], *, origin: str) -> str:
        """Answer `navigator.credentials.create` options as the browser would."""
        rp_id = options["rp"]["id"]
        credential = Credential(
            id=secrets.token_bytes(32),
            key=ec.generate_private_key(ec.SECP256R1()),
            rp_id=rp_id,
            user_handle=unb64url(options["user"]["id"]),
        )
        self.credentials.append(credential)
        numbers = credential.key.public_key().public_numbers()
        cose = cbor2.dumps(
            {
                1: 2,
                3: -7,
                -1: 1,
                -2: numbers.x.to_bytes(32, "big"),
                -3: numbers.y.to_bytes(32, "big"),
            }
        )
        attested = bytes(16) + struct.pack(">H", len(credential.id)) + credential.id + cose
        auth_data = _auth_data(rp_id, UP | UV | AT, 0) + attested
        client_data = _client_data("webauthn.create", options["challenge"], origin)
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return json.dumps(
            {
                "id": b64url(credential.id),
                "rawId": b64url(credential.id),
                "type": "public-key",
                "authenticatorAttachment": "platform",
                "clientExtensionResults": {"credProps": {"rk": True}},
                "response": {
                    "clientDataJSON": b64url(client_data),
                    "attestationObject": b64url(attestation),
                    "transports": ["internal"],
                },
            }
        )

    def get(self, options: dict[str, Any], *, origin: str, rp_id: str | None = None) -> str:
        """Answer `navigator.credentials.get` options with the last passkey made for the party."""
        rp_id = rp_id or options["rpId"]
        credential = next(c for c in reversed(self.credentials) if c.rp_id == options["rpId"])
        credential.sign_count += 1
        auth_data = _auth_data(rp_id, UP | UV, credential.sign_count)
        client_data = _client_data("webauthn.get", options["challenge"], origin)
        signature = credential.key.sign(
            auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256())
        )
        return json.dumps(
            {
                "id": b64url(credential.id),
                "rawId": b64url(credential.id),
                "type": "public-key",
                "authenticatorAttachment": "platform",
                "clientExtensionResults": {},
                "response": {
                    "clientDataJSON": b64url(client_data),
                    "authenticatorData": b64url(auth_data),
                    "signature": b64url(signature),
                    "userHandle": b64url(credential.user_handle),
                },
            }
        )


def _auth_data(rp_id: str, flags: int, sign_count: int) -> bytes:
    return hashlib.sha256(rp_id.encode()).digest() + bytes([flags]) + struct.pack(">I", sign_count)


def _client_data(kind: str, challenge: str, origin: str) -> bytes:
    return json.dumps(
        {"type": kind, "challenge": challenge, "origin": origin, "crossOrigin": False}
    ).encode()
