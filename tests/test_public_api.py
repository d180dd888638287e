"""The public surface is what ``emailmw.__all__`` says, and it changes only on purpose."""

from __future__ import annotations

import types

import pytest

import emailmw

# Changing this list is changing the public API: say so in the commit (#37 added the
# rclpy-shaped modules, the message packages, Parameter, create_node, try_shutdown; #39
# BatchPolicy and NO_BATCH; #48 ConnectionLimitError; #49 rosgraph_msgs, service_msgs).
PUBLIC = [
    "Ack",
    "ActionType",
    "AuthenticationError",
    "BatchPolicy",
    "Client",
    "ClosedError",
    "ConfigError",
    "ConnectError",
    "ConnectionLimitError",
    "Context",
    "ContextAlreadyInitializedError",
    "ContextError",
    "ContextNotInitializedError",
    "DeadlineMissed",
    "DurabilityPolicy",
    "Email",
    "EmailMWError",
    "EmailReceiver",
    "EmailSender",
    "Endpoint",
    "Executor",
    "ForeignEmailError",
    "Future",
    "Gateway",
    "Gid",
    "GroupSettings",
    "GuardCondition",
    "GuardConditionAlreadyInUseError",
    "Headers",
    "HistoryPolicy",
    "IncomingEmail",
    "InterfaceError",
    "IntraprocessNetwork",
    "IntraprocessReceiver",
    "IntraprocessSender",
    "InvalidCallbackError",
    "InvalidHeaderError",
    "InvalidNameError",
    "Keystore",
    "MalformedEmailError",
    "MessageInfo",
    "MessageLost",
    "MessageTooLargeError",
    "MultiThreadedExecutor",
    "NO_BATCH",
    "Node",
    "NodeGuardCondition",
    "NodePublisher",
    "NodeSubscription",
    "Options",
    "Parameter",
    "PermissionDeniedError",
    "Publisher",
    "QoSProfile",
    "ReceiveError",
    "Recipients",
    "RemoteError",
    "RequestId",
    "RoutingError",
    "SecurityError",
    "SendError",
    "Service",
    "ServiceClient",
    "ServiceInfo",
    "ServiceRequest",
    "ServiceServer",
    "ServiceTimeoutError",
    "ServiceType",
    "SingleThreadedExecutor",
    "Subscription",
    "SubscriptionEventCallbacks",
    "TLSError",
    "Timer",
    "TransportError",
    "TypeMismatchError",
    "UndecryptableError",
    "UnknownRequestError",
    "UserInfo",
    "WaitResult",
    "WaitSet",
    "__version__",
    "action",
    "action_msgs",
    "build_email",
    "builtin_interfaces",
    "callback_groups",
    "clock",
    "create_node",
    "deserialize",
    "duration",
    "example_interfaces",
    "exceptions",
    "executors",
    "floctrl",
    "geometry_msgs",
    "get_default_context",
    "get_global_executor",
    "get_interface",
    "get_rmw_implementation_identifier",
    "init",
    "interface_names",
    "interfaces",
    "intraprocess_pair",
    "load_gateway",
    "logging",
    "message",
    "node",
    "ok",
    "open_transport",
    "parameter",
    "parse_email",
    "qos",
    "rcl_interfaces",
    "rosgraph_msgs",
    "serialize",
    "service",
    "service_msgs",
    "shutdown",
    "signals",
    "spin",
    "spin_once",
    "spin_until_future_complete",
    "std_msgs",
    "stem",
    "task",
    "time",
    "try_shutdown",
    "unique_identifier_msgs",
    "utilities",
    "wait_for_message",
    "wait_for_message_with_info",
    "wait_for_request",
    "wait_for_request_with_info",
    "wait_for_response",
    "wait_for_response_with_info",
    "ymp",
]


def test_all_is_the_pinned_public_surface() -> None:
    assert sorted(emailmw.__all__) == PUBLIC
    assert len(set(emailmw.__all__)) == len(emailmw.__all__)


def test_every_exported_name_exists_and_every_public_name_is_exported() -> None:
    for name in emailmw.__all__:
        assert hasattr(emailmw, name), name
    public = {
        name
        for name, value in vars(emailmw).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    public.discard("annotations")  # from __future__ import annotations
    assert public <= set(emailmw.__all__), sorted(public - set(emailmw.__all__))


def test_exported_errors_share_one_root() -> None:
    for name in emailmw.__all__:
        value = getattr(emailmw, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, emailmw.EmailMWError), name


def test_foreign_mail_is_not_a_kind_of_malformed_mail() -> None:
    """A well-formed email emailmw does not carry is no malformed one: callers that handle
    both say so."""
    assert not issubclass(emailmw.ForeignEmailError, emailmw.MalformedEmailError)
    assert issubclass(emailmw.ForeignEmailError, emailmw.EmailMWError)


def test_every_public_module_s_errors_share_one_root() -> None:
    """Also the rclpy-shaped modules' (``emailmw.executors.TimeoutException`` was a plain
    ``Exception``)."""
    import importlib

    for module_name in ("executors", "exceptions", "node", "qos", "time", "task", "action"):
        module = importlib.import_module(f"emailmw.{module_name}")
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception):
                assert issubclass(value, emailmw.EmailMWError), f"{module_name}.{name}"


def test_a_misuse_is_an_emailmw_error_and_the_standard_one() -> None:
    """What a caller gets wrong raises an ``EmailMWError`` that is also the standard error
    rclpy raises (``except KeyError``, ``except RuntimeError`` keep working)."""
    from emailmw.executors import SingleThreadedExecutor
    from emailmw.qos import QoSPresetProfiles

    with pytest.raises(emailmw.EmailMWError) as caught:
        QoSPresetProfiles.get_from_short_key("no_such_preset")
    assert isinstance(caught.value, KeyError)
    context = emailmw.IntraprocessNetwork().context("a@x")
    try:
        node = emailmw.Node("n", context=context)
        SingleThreadedExecutor(context=context).add_node(node)
        with pytest.raises(emailmw.EmailMWError) as caught:
            SingleThreadedExecutor(context=context).add_node(node)
        assert isinstance(caught.value, RuntimeError)
        with pytest.raises(emailmw.EmailMWError) as caught:
            node.create_timer(-1.0, lambda: None)
        assert isinstance(caught.value, ValueError)
    finally:
        context.shutdown()


def test_import_emailmw_imports_what_is_used_when_it_is_used() -> None:
    """``import emailmw`` loads no module of its own (names come when first used, PEP
    562), and a configuration is read without anything else imported first (the built-in
    transports' names are known to it: was a KeyError traceback)."""
    import subprocess
    import sys

    code = (
        "import sys, emailmw\n"
        "print(sorted(m for m in sys.modules if m.startswith('emailmw')))\n"
        "from emailmw._core.config import load_options\n"
        "o = load_options({'transport': 'curl', 'user': {'url-smtp': 'smtps://m.test',\n"
        "    'url-imap': 'imaps://m.test', 'username': 'a@m.test', 'password': 'Pw-1'},\n"
        "    'recipients': {'to': 'b@m.test'}})\n"
        "print(o.transport, emailmw.Node.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["['emailmw']", "curl Node"]
