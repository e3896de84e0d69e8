"""The daemon's TLS settings, validated at start so they fail closed and say why.

A client CA without a server certificate and key is an error (it would otherwise serve plain
text with no client authentication). Each file is read with the bounded reader (regular file,
at most ``MAX_TLS_FILE_BYTES``) and must hold the PEM blocks its role needs; a problem is one
line naming the setting, the file and what was wrong.
"""

from __future__ import annotations

import base64
import binascii
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_TLS_FILE_BYTES
from kernelpolicy.safeio import read_bytes_bounded

_BLOCK = re.compile(
    rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\r\n]+?)-----END \1-----", re.S
)
_CERTIFICATE = {b"CERTIFICATE", b"TRUSTED CERTIFICATE"}
_KEYS = {b"PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY", b"ENCRYPTED PRIVATE KEY"}


def _read_pem(path: Path, setting: str, wanted: set[bytes], what: str) -> bytes:
    """The bytes of a PEM file with at least one block of a ``wanted`` kind."""

    def fail(message: str) -> DaemonError:
        return DaemonError(f"{setting}: {message}")

    data = read_bytes_bounded(path, limit=MAX_TLS_FILE_BYTES, limit_name="MAX_TLS_FILE_BYTES",
                              fail=fail)  # fmt: skip
    blocks = [(m.group(1), m.group(2)) for m in _BLOCK.finditer(data)]
    kinds = {kind for kind, _ in blocks}
    if not kinds:
        raise fail(f"{path}: not a PEM file (no -----BEGIN ...----- block); expected {what}")
    if b"ENCRYPTED PRIVATE KEY" in kinds & wanted:
        raise fail(f"{path}: the private key is encrypted; expected an unencrypted PEM key")
    if not kinds & wanted:
        found = ", ".join(sorted(k.decode() for k in kinds))
        raise fail(f"{path}: holds {found}; expected {what}")
    for kind, body in blocks:
        if kind in wanted and not _is_der(body):
            raise fail(
                f"{path}: its {kind.decode()} block is not valid base64 DER; expected {what}"
            )
    return data


def _is_der(body: bytes) -> bool:
    """Whether a PEM body decodes to one DER SEQUENCE whose length matches its encoding."""
    try:
        der = base64.b64decode(b"".join(body.split()), validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(der) < 2 or der[0] != 0x30:
        return False
    length, start = der[1], 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or len(der) < 2 + count:
            return False
        length, start = int.from_bytes(der[2 : 2 + count], "big"), 2 + count
    return start + length == len(der)


@dataclass(frozen=True)
class TlsFiles:
    """The PEM contents of the daemon's certificate, key and optional client CA."""

    cert: bytes
    key: bytes
    client_ca: bytes | None = None

    @classmethod
    def load(cls, cert: Path | None, key: Path | None, client_ca: Path | None = None) -> TlsFiles:
        """Read and check the files named by the TLS settings.

        Raises:
            DaemonError: One line naming the setting, the file and what was wrong.
        """
        if client_ca is not None and (cert is None or key is None):
            raise DaemonError(
                "KERNELPOLICY_TLS_CLIENT_CA_FILE needs KERNELPOLICY_TLS_CERT_FILE and "
                "KERNELPOLICY_TLS_KEY_FILE: client certificates are only checked over TLS"
            )
        if cert is None or key is None:
            missing = "KERNELPOLICY_TLS_KEY_FILE" if key is None else "KERNELPOLICY_TLS_CERT_FILE"
            raise DaemonError(
                f"TLS needs both KERNELPOLICY_TLS_CERT_FILE and KERNELPOLICY_TLS_KEY_FILE; "
                f"{missing} is not set"
            )
        ca = None
        if client_ca is not None:
            ca = _read_pem(
                client_ca, "KERNELPOLICY_TLS_CLIENT_CA_FILE", _CERTIFICATE, "CERTIFICATE blocks"
            )
        return cls(
            _read_pem(cert, "KERNELPOLICY_TLS_CERT_FILE", _CERTIFICATE, "a CERTIFICATE block"),
            _read_pem(key, "KERNELPOLICY_TLS_KEY_FILE", _KEYS, "a PRIVATE KEY block"),
            ca,
        )

    def check_pair(self) -> None:
        """Let grpc (BoringSSL) load the pair once, on a throwaway server, so that a key that
        does not match its certificate is reported as such and not as an address problem.

        Raises:
            DaemonError: grpc refused the certificate and key.
        """
        import grpc

        probe = grpc.server(ThreadPoolExecutor(max_workers=1))
        try:
            probe.add_secure_port("127.0.0.1:0", self.credentials())
        except RuntimeError:
            raise DaemonError(
                "KERNELPOLICY_TLS_CERT_FILE/KERNELPOLICY_TLS_KEY_FILE: grpc refused the "
                "certificate and key (does the key belong to the certificate?)"
            ) from None
        finally:
            probe.stop(None)

    def credentials(self) -> Any:
        """grpc server credentials; client certificates are required when a CA is given."""
        import grpc

        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


def tls_from_settings(settings: Any) -> TlsFiles | None:
    """The validated TLS files of ``settings``, or None when no TLS setting is given."""
    if not (settings.tls_cert_file or settings.tls_key_file or settings.tls_client_ca_file):
        return None
    files = TlsFiles.load(
        settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    )
    files.check_pair()
    return files


def client_credentials(ca: Path | None, cert: Path | None = None, key: Path | None = None) -> Any:
    """grpc channel credentials for a client of a daemon that speaks TLS.

    Args:
        ca: The CA certificates (PEM) the daemon's certificate must chain to; the system's
            roots when None.
        cert: This client's certificate, for a daemon that requires client certificates
            (``KERNELPOLICY_TLS_CLIENT_CA_FILE``); given with ``key`` only.
        key: Its unencrypted private key.

    Raises:
        DaemonError: One line naming the option (``--tls-ca``, ``--tls-cert``, ``--tls-key``),
            the file and what was wrong.
    """
    import grpc

    if (cert is None) != (key is None):
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise DaemonError(f"{given} needs {missing}: a client certificate goes with its key")
    roots = None if ca is None else _read_pem(ca, "--tls-ca", _CERTIFICATE, "CERTIFICATE blocks")
    if cert is None or key is None:
        return grpc.ssl_channel_credentials(root_certificates=roots)
    return grpc.ssl_channel_credentials(
        root_certificates=roots,
        private_key=_read_pem(key, "--tls-key", _KEYS, "a PRIVATE KEY block"),
        certificate_chain=_read_pem(cert, "--tls-cert", _CERTIFICATE, "a CERTIFICATE block"),
    )
