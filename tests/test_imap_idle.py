"""IDLE as the server may say it: news that came in the same packet as an earlier answer
is news at once, not when the next packet comes. Against a scripted IMAP peer on loopback
(the byte layout a real server sends only by chance; the real servers are in
tests/email/test_email_system.py and test_reliability.py)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import imapclient
import imapclient.exceptions
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from emailmw._transport.imap import idle_check, start_idle, stashed_news

GREETING = b"* OK [CAPABILITY IMAP4rev1 IDLE] scripted\r\n"


def _certificate(where: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as files in ``where``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = where / "cert.pem", where / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))  # fmt: skip
    return cert_file, key_file


@contextmanager
def _peer(answer: bytes, tls: bool, where: Path) -> Iterator[imapclient.IMAPClient]:
    """An IMAP peer that greets, then answers the client's IDLE with ``answer`` in one
    write (and says nothing more); a client connected to it."""
    listener = socket.create_server(("127.0.0.1", 0))
    cert_file, key_file = _certificate(where)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_file, key_file)
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        if tls:
            conn = server_context.wrap_socket(conn, server_side=True)
        with conn:
            conn.sendall(GREETING)
            while True:
                line = b""
                while not line.endswith(b"\r\n"):
                    line += conn.recv(1)
                tag, command = line.split()[:2]
                if command.upper() == b"IDLE":
                    break
                conn.sendall(b"* CAPABILITY IMAP4rev1 IDLE\r\n" + tag + b" OK done\r\n")
            conn.sendall(answer)
            done.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    context = ssl.create_default_context(cafile=str(cert_file))
    port = listener.getsockname()[1]
    client = imapclient.IMAPClient("127.0.0.1", port, ssl=tls, ssl_context=context, timeout=30)
    try:
        yield client
    finally:
        done.set()
        client.shutdown()
        thread.join(10)
        listener.close()


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_news_in_the_packet_of_the_idle_continuation_is_seen_at_once(
    tls: bool, tmp_path: Path
) -> None:
    # (imaplib read both lines into its buffer when it read "+ idling": a wait on the
    # socket alone saw nothing until the next email came, 54 s and 91 s in #57)
    with _peer(b"+ idling\r\n* 3 EXISTS\r\n", tls, tmp_path) as client:
        start_idle(client)
        started = time.monotonic()
        assert idle_check(client, 5) == [(3, b"EXISTS")]
        assert time.monotonic() - started < 4  # (not the wait's end)


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_news_before_the_idle_continuation_is_kept_not_an_error(tls: bool, tmp_path: Path) -> None:
    with _peer(b"* 4 EXISTS\r\n+ idling\r\n", tls, tmp_path) as client:
        start_idle(client)
        assert stashed_news(client)
        assert idle_check(client, 0.2) == []  # (nothing more: a quiet connection)


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_a_peer_that_closed_in_idle_raises(tls: bool, tmp_path: Path) -> None:
    with _peer(b"+ idling\r\n", tls, tmp_path) as client:
        start_idle(client)
        client.socket().shutdown(socket.SHUT_RD)  # (EOF as a closed peer gives it)
        with pytest.raises(imapclient.exceptions.IMAPClientAbortError):
            idle_check(client, 5)
