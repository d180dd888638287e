"""ROS between sites (#57): two mail servers of different providers that mail each other
(:func:`emailmw.testing.mailserver.federate`: each server delivers the other's domain to its
MX port, and every MTA on the way adds its ``Received``), a node on each, signing in
``enforce``: a topic, a service, an action, parameters and discovery cross from an account
on one site to an account on the other, as every deployment across providers does
(``docs/addressing.md``, "Across sites")."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import emailmw
from emailmw import Keystore
from emailmw.action import ActionClient, ActionServer, GoalResponse
from emailmw.action_msgs.msg import GoalStatus
from emailmw.callback_groups import ReentrantCallbackGroup
from emailmw.example_interfaces.action import Fibonacci
from emailmw.example_interfaces.srv import AddTwoInts
from emailmw.executors import MultiThreadedExecutor
from emailmw.parameter import Parameter
from emailmw.parameter_client import AsyncParameterClient
from emailmw.std_msgs.msg import String
from emailmw.testing._modes import wait_for
from emailmw.testing.mailserver import MailServer
from tests.helpers import Recorder

from .helpers import TRANSPORTS, transport_extra

#: what each site's node may do (SROS2's default deny for the rest): the action's five
#: names and the parameter services of the far node are services and topics too
PERMISSIONS = """\
identities:
  near: {publish: [/chatter], subscribe: [/fibonacci/_action/*], serve: [/near_node/*],
         call: [/add_two_ints, /fibonacci/_action/*, /far_node/*]}
  far: {subscribe: [/chatter], serve: [/add_two_ints, /fibonacci/_action/*, /far_node/*],
        publish: [/fibonacci/_action/*]}
"""


@pytest.fixture(scope="module")
def keystore(tmp_path_factory: pytest.TempPathFactory) -> Keystore:
    store = Keystore.create(tmp_path_factory.mktemp("sites") / "keystore")
    for name in ("near", "far"):
        store.create_key(name)
    (store.path / "permissions.yaml").write_text(PERMISSIONS)
    return store


def _fibonacci(goal_handle: Any) -> Any:
    sequence = [0, 1]
    for _ in range(1, goal_handle.request.order):
        sequence.append(sequence[-1] + sequence[-2])
        goal_handle.publish_feedback(Fibonacci.Feedback(sequence=list(sequence)))
    goal_handle.succeed()
    return Fibonacci.Result(sequence=sequence)


@pytest.fixture(params=TRANSPORTS)
def sites(
    request: pytest.FixtureRequest,
    mailserver: MailServer,
    federated_mailserver: MailServer,
    keystore: Keystore,
) -> Iterator[dict[str, Any]]:
    """A node on each site, each account sending to the other's: ``near`` (the run's
    server) and ``far`` (the federated one), both spinning."""
    transport = request.param
    near_address = mailserver.fresh_account()
    far_address = federated_mailserver.fresh_account()

    def config(server: MailServer, address: str, to: str, identity: str) -> dict[str, Any]:
        security = {"keystore": str(keystore.path), "identity": identity, "verify": "enforce"}
        extra = transport_extra(transport)
        return {"email": server.config(address, to=to, transport=transport, security=security,
                                       **extra)}  # fmt: skip

    near_context = emailmw.Context(config(mailserver, near_address, far_address, "near"))
    far_context = emailmw.Context(config(federated_mailserver, far_address, near_address, "far"))
    near = emailmw.Node("near_node", context=near_context)
    far = emailmw.Node("far_node", context=far_context)
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(near)
    executor.add_node(far)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        yield {"near": near, "far": far, "far_address": far_address}
    finally:
        executor.shutdown()
        near_context.shutdown()
        far_context.shutdown()


def test_a_topic_crosses_to_the_other_site_through_both_mtas(sites: dict[str, Any]) -> None:
    heard = Recorder[tuple[str, bool]]()
    sites["far"].create_subscription(
        String, "/chatter", lambda msg, info: heard((msg.data, info.identity == "near")), 10
    )
    publisher = sites["near"].create_publisher(String, "/chatter", 10)
    # discovery crosses too: the far node's subscription is seen from the near site
    assert wait_for(lambda: sites["near"].count_subscribers("/chatter") >= 1, 60)
    for i in range(3):
        publisher.publish(String(data=f"hello {i}"))
    # (in the order the far server stored them: two MTAs deliver in parallel)
    assert sorted(heard.wait_count(3, 60)) == [(f"hello {i}", True) for i in range(3)]


def test_a_service_action_and_parameters_cross_and_answer_back(sites: dict[str, Any]) -> None:
    near, far = sites["near"], sites["far"]
    far.create_service(AddTwoInts, "/add_two_ints", _sum)
    ActionServer(far, Fibonacci, "fibonacci", _fibonacci,
                 goal_callback=lambda goal: GoalResponse.ACCEPT,
                 callback_group=ReentrantCallbackGroup())  # fmt: skip
    far.declare_parameter("speed", 3)

    client = near.create_client(AddTwoInts, "/add_two_ints")
    assert client.wait_for_service(timeout_sec=60)  # (discovery, across)
    answer = client.call_async(AddTwoInts.Request(a=2, b=40)).result(60)
    assert answer.sum == 42

    actions = ActionClient(near, Fibonacci, "fibonacci")
    assert actions.wait_for_server(timeout_sec=60)
    feedback = Recorder[list[int]]()
    handle = actions.send_goal_async(
        Fibonacci.Goal(order=5), lambda m: feedback(list(m.feedback.sequence))
    ).result(60)
    assert handle.accepted
    result = handle.get_result_async().result(60)
    assert (result.status, list(result.result.sequence)) == (
        GoalStatus.STATUS_SUCCEEDED, [0, 1, 1, 2, 3, 5])  # fmt: skip
    assert sorted(feedback.wait_count(4, 60), key=len) == [  # (a topic: in arrival order)
        [0, 1, 1], [0, 1, 1, 2], [0, 1, 1, 2, 3], [0, 1, 1, 2, 3, 5]]  # fmt: skip

    parameters = AsyncParameterClient(near, "/far_node")
    assert parameters.wait_for_services(60)
    assert parameters.set_parameters([Parameter("speed", value=9)]).result(60).results[0].successful
    assert far.get_parameter("speed").value == 9


def _sum(request: Any, response: Any) -> Any:
    response.sum = request.a + request.b
    return response


def test_what_crossed_carries_both_sites_received_lines(
    mailserver: MailServer, federated_mailserver: MailServer, tmp_path: Path
) -> None:
    """An email from an account on one site, as the other site's mailbox stores it: a
    ``Received`` of each site's MTA (mail between providers, not a copy made by one)."""
    sender, receiver = mailserver.fresh_account(), federated_mailserver.fresh_account()
    with emailmw.Context({"email": mailserver.config(sender, to=receiver)}) as context:
        emailmw.Publisher("/crossing", context=context).publish("over")
        assert context.flush(60)
    stored = _wait_for_one(federated_mailserver.maildir(receiver))
    received = [line for line in stored.splitlines() if line.startswith(b"Received:")]
    text = b"\n".join(received)
    assert f"mail.{mailserver.domain}".encode() in text
    assert f"mail.{federated_mailserver.domain}".encode() in text


def _wait_for_one(maildir: Path, timeout: float = 60) -> bytes:
    def found() -> list[Path]:
        return [p for sub in ("new", "cur") for p in (maildir / sub).glob("*")]

    assert wait_for(lambda: bool(found()), timeout), f"nothing reached {maildir}"
    return found()[0].read_bytes()


@pytest.mark.parametrize("imap_server", ["dovecot", "cyrus", "courier"])
def test_a_site_restarted_keeps_its_ports_and_mail_and_is_reached_again(
    mailserver: MailServer, imap_server: str
) -> None:
    """A site's server stopped and started again (``start(fresh=False)``, a provider's
    restart) answers where it did, with the accounts and mail it held, and the other
    site's MTA delivers to it again. Was: every port chosen anew, so its clients and the
    sites federated with it could not reach it again, and Cyrus's store made anew (every
    login refused): the fleet soak, bench/fleet.py."""
    import imaplib
    import ssl

    from emailmw.testing.mailserver import federate

    state = Path(tempfile.mkdtemp(prefix="emailmw-siter-", dir="/tmp"))
    site = MailServer(state_dir=state, domain="site-r.test", pool_size=5,
                      imap_server=imap_server)  # fmt: skip

    def stored(address: str) -> int:
        tls = ssl.create_default_context(cafile=str(site.ca_file))
        with imaplib.IMAP4_SSL(site.host, site.imaps_port, ssl_context=tls) as imap:
            imap.login(address, site.password)
            return int(imap.select("INBOX")[1][0] or 0)

    try:
        site.start(fresh=True)
        federate(mailserver, site)
        sender, receiver = mailserver.fresh_account(), site.fresh_account()
        with emailmw.Context({"email": mailserver.config(sender, to=receiver)}) as context:
            publisher = emailmw.Publisher("/crossing", context=context)
            publisher.publish("before")
            assert context.flush(60)
            assert wait_for(lambda: stored(receiver) == 1, 60)
            ports = site.ports
            site.stop()
            site.start(fresh=False)
            assert site.ports == ports
            publisher.publish("after")
            assert context.flush(60)
            assert wait_for(lambda: stored(receiver) == 2, 60)
    finally:
        site.stop()
        shutil.rmtree(state, ignore_errors=True)
