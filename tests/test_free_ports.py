"""The test helper's port choice (no server started)."""

from __future__ import annotations

import socket

from emailmw.testing import mailserver
from emailmw.testing.mailserver import free_ports


def test_chosen_ports_lie_outside_the_range_outgoing_connections_take() -> None:
    """A site stopped for a restart gets its ports back only if nothing takes them
    meanwhile; a port of the kernel's ephemeral range is taken as the local port of any
    outgoing connection on the machine. Was: the kernel's choice, and CI's restart test
    (tests/email/test_sites.py) found all five ports of a site taken."""
    low, high = mailserver._ephemeral_range()
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(not low <= port <= high for port in ports), ports
    for port in ports:  # each one free to bind
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_chosen_port_is_not_chosen_again_until_its_reservation_lapses() -> None:
    first = free_ports(30)
    again = free_ports(30)
    assert not set(first) & set(again)
    # its own server takes a reservation over at a restart
    assert all(mailserver._reserve_port(port, renew=True) for port in first)
    assert not mailserver._reserve_port(first[0])
