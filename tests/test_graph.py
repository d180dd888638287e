"""Discovery: the graph is a pure function of the announcements."""

from __future__ import annotations

import emailmw
from emailmw import Context, Node, std_msgs
from emailmw._delivery.graph import GRAPH_TOPIC, NodeRecord, build_graph

from .helpers import round_trip

S = 1_000_000_000


def test_nodes_announce_leave_and_expire(ctx: Context) -> None:
    # (without the parameter services every node offers: six services more each)
    talker = Node(
        "talker",
        namespace="/robot",
        context=ctx,
        announce_period=1.0,
        start_parameter_services=False,
    )
    talker.create_publisher(std_msgs.msg.String, "chatter")
    talker.create_service(emailmw.example_interfaces.srv.AddTwoInts, "add", lambda q, r: r)
    gone = Node("gone", context=ctx, announce_period=1.0, start_parameter_services=False)
    gone.create_subscription(std_msgs.msg.String, "/robot/chatter", lambda m: None)
    round_trip(ctx)  # all earlier mail has gone through
    history = ctx.receiver.history(GRAPH_TOPIC, 100)
    now = max(int(e.headers["Source-Timestamp"]) for e in history)

    graph = build_graph(history, now)
    assert set(graph.nodes) == {"/robot/talker", "/gone"}
    assert graph.topics()["/robot/chatter"] == {"std_msgs/msg/String"}
    assert graph.services() == {"/robot/add": {"example_interfaces/srv/AddTwoInts"}}
    assert graph.nodes["/robot/talker"].publishers == (("/robot/chatter", "std_msgs/msg/String"),)

    gone.destroy_node()  # leaves
    round_trip(ctx)
    graph = build_graph(ctx.receiver.history(GRAPH_TOPIC, 100), now)
    assert set(graph.nodes) == {"/robot/talker"}
    # a node that stops announcing (died without leaving) expires after three periods
    assert build_graph(ctx.receiver.history(GRAPH_TOPIC, 100), now + 4 * S).nodes == {}


def test_destroying_any_entity_is_announced_at_once(ctx: Context) -> None:
    """Every create_* and destroy_* sends an announcement: the graph never waits for the
    next periodic one (an hour away here)."""
    node = Node("changing", context=ctx, announce_period=3600.0, start_parameter_services=False)
    pub = node.create_publisher(std_msgs.msg.String, "chatter")
    sub = node.create_subscription(std_msgs.msg.String, "heard", lambda m: None)
    client = node.create_client(emailmw.example_interfaces.srv.AddTwoInts, "add")
    service = node.create_service(
        emailmw.example_interfaces.srv.AddTwoInts, "serve", lambda q, r: r
    )

    def graph() -> NodeRecord:
        round_trip(ctx)
        history = ctx.receiver.history(GRAPH_TOPIC, 100)
        now = max(int(e.headers["Source-Timestamp"]) for e in history)
        return build_graph(history, now).nodes["/changing"]

    record = graph()
    assert all((record.publishers, record.subscriptions, record.clients, record.services))
    node.destroy_publisher(pub)
    assert graph().publishers == ()
    node.destroy_subscription(sub)
    assert graph().subscriptions == ()
    node.destroy_client(client)
    assert graph().clients == ()
    node.destroy_service(service)
    assert graph().services == ()
