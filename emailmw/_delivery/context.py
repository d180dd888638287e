"""Layer 5: the context owns options, sender, receiver, polling manager and handlers.

One process may hold several contexts; they share nothing. ``emailmw.init()`` creates the
default context that entities use when no ``context=`` is given.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

from .._core import signalsafe
from .._core.closeable import Closeable
from .._core.config import SEND_GUARANTEES, Options, load_options
from .._core.errors import (
    AuthenticationError,
    ClosedError,
    ConfigError,
    ConnectError,
    ContextAlreadyInitializedError,
    ContextNotInitializedError,
    EmailMWError,
    InvalidArgumentError,
    SendError,
    TLSError,
)
from .._core.log import configure_from_env, get_logger
from .._core.protocol import ack_email
from .._core.ros_args import RosArgs, parse_ros_args
from .._core.ros_logging import set_levels_from_args
from .._core.types import Email
from .._security import SecureSender, Security
from .._transport.base import CONTROL, EmailReceiver, EmailSender
from .._transport.budget import ReceiveBudget
from .._transport.factory import make_transport
from .._transport.group import GroupStore, Head
from .._transport.intraprocess import IntraprocessNetwork as _Network
from .._transport.split import SplittingSender
from .._transport.transport import Transport
from .handlers import (
    AckHandler,
    AckSink,
    MessageSink,
    RequestSink,
    ResponseSink,
    ServiceHandler,
    SubscriptionHandler,
)
from .peers import GRAPH_TOPIC, Peers, PeerSender, own_features
from .polling import Handler, PollingManager
from .routing import Outlet, Router, own_hub

__all__ = [
    "Context",
    "IntraprocessNetwork",
    "SignalHandlerOptions",
    "get_default_context",
    "get_rmw_implementation_identifier",
    "init",
    "ok",
    "open_transport",
    "shutdown",
    "try_shutdown",
]

_log = get_logger("context")

#: a context that receives nothing this long after it was made gives its receiving
#: session back (seconds): a process that only sends holds none (``docs/providers.md``)
UNUSED_SESSION_S: Final = 5.0

ConfigLike = Options | Mapping[str, Any] | str | os.PathLike[str] | None


class _Closeable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Closeable)


def open_transport(config: ConfigLike = None) -> tuple[EmailSender, EmailReceiver]:
    """The configured sender and receiver on their own, for tools that handle raw email.

    The caller owns both and closes them. Raises what connecting raises
    (:class:`~emailmw.AuthenticationError`, :class:`~emailmw.TLSError`, ...).
    """
    configure_from_env()
    transport = make_transport(load_options(config))
    return transport.sender, transport.receiver


class Context(Closeable):
    """An isolated emailmw instance: a transport, a polling thread and the routing tables.

    Creating a context connects (a wrong password or an untrusted certificate fails here)
    and fixes where its receiving starts; it starts handing out mail once an entity first
    waits for some (:meth:`start_receiving`). A context that has nothing to receive
    :data:`UNUSED_SESSION_S` seconds after it was made gives its receiving session back
    (a process that only sends holds none) and connects again when it starts receiving,
    handing out everything that arrived since it was made. :meth:`shutdown` (or
    ``close``, or leaving the ``with`` block) closes every entity created on it, stops
    polling and closes the transport. Thread-safe.

    ``transport`` (or ``sender``/``receiver``, both or neither: a transport without a
    store for delivery-mode groups) replaces the transport the options would build.
    ``args``: a command line whose ``--ros-args`` apply to the nodes on this context
    (``-p``, ``--params-file``, ``--log-level``, ``-r``); :func:`init` gives them too.
    """

    def __init__(
        self,
        config: ConfigLike = None,
        *,
        sender: EmailSender | None = None,
        receiver: EmailReceiver | None = None,
        transport: Transport | None = None,
        args: Sequence[str] | None = None,
    ) -> None:
        configure_from_env()
        self.ros_args: RosArgs = parse_ros_args(args)
        set_levels_from_args(self.ros_args.log_levels)
        self.options = load_options(config)
        if (sender is None) != (receiver is None):
            raise InvalidArgumentError("give both sender and receiver, or neither")
        if sender is not None and receiver is not None:
            if transport is not None:
                raise InvalidArgumentError("give a transport, or a sender and a receiver, not both")
            transport = Transport(sender, receiver)
        in_process = self.options.transport == "intraprocess"
        self._security = Security(
            self.options.security,
            state_file=self.options.state_file,
            hub=own_hub(self.address, self.options.routing.hub),
            accounts=() if in_process else (self.address,),
        )
        self._budget = ReceiveBudget(self.options.queue_bytes, self.options.queue_limit)
        if transport is None:
            try:
                transport = make_transport(self.options, self._budget)
            except BaseException:
                self._security.close()
                raise
        self._group_store = transport.group_store
        sender, receiver = transport.sender, transport.receiver
        self._receiving = False
        self._group_wants: tuple[Callable[[Head], bool], ...] = ()
        if self._security.transforms_outgoing:
            sender = SecureSender(sender, self._security)
        self._peers: Peers | None = None
        if not in_process:  # (in process, no email has a size limit but max-message-size)
            inner = sender
            self._peers = Peers(
                self.address,
                own_features(self._security.can_decrypt),
                send=lambda email: inner.send(email, guarantee="memory", batch=CONTROL),
                history=lambda: receiver.history(GRAPH_TOPIC, 200),
                trusts=self._security.trusts,
                receiving=lambda: self._receiving,
                plain=self.options.plain_readers,
            )
            sender = SplittingSender(sender, self.options, self._peers)
            sender = PeerSender(sender, self._peers, self.options.batch)
        self._sender = sender
        self._receiver = receiver
        self._lock = threading.Lock()
        self._entities: weakref.WeakSet[Any] = weakref.WeakSet()
        self._shut_down = False
        self._stopping = threading.Event()  # set at the first sign of shutdown
        self._signalled = False  # a signal asked for shutdown (set in its handler: no lock)
        self._on_shutdown: list[Callable[[], None]] = []
        # what shared() created, by key: closed at shutdown before the entities
        self._shared: dict[str, _Closeable] = {}
        self._subscription_handler = SubscriptionHandler()
        self._service_handler = ServiceHandler(self.options.reply_domains)
        self._ack_handler = AckHandler()
        self._polling = PollingManager(
            receiver,
            security=self._security,
            acknowledge=self.acknowledge,
            max_message_size=self.options.max_message_size,
            part_timeout=self.options.part_timeout,
            passes=lambda route: self._router.forwards(route),  # noqa: PLW0108 - (made below)
            others=self._claimed_by_a_group,
        )
        self._polling.register_handler(self._ack_handler)
        self._polling.register_handler(self._subscription_handler)
        self._polling.register_handler(self._service_handler)
        self._router = Router(
            own_hub(self.address, self.options.routing.hub),
            self.address,
            Outlet(sender, self.options.recipients.from_),
        )
        self._router.set_routes(dict(self.options.routing.routes))
        self._polling.register_handler(self._router)
        if self._peers is not None:
            self._polling.register_handler(self._peers.observe)
        self._give_back: threading.Timer | None = None
        if not in_process:
            self._give_back = threading.Timer(UNUSED_SESSION_S, self._give_back_session)
            self._give_back.name, self._give_back.daemon = "emailmw-unused-session", True
            self._give_back.start()
        _log.debug(
            "context started (%s transport, %s)", self.options.transport, self.options.source
        )

    def _give_back_session(self) -> None:
        """Give the receiving session back when nothing receives (:data:`UNUSED_SESSION_S`
        after the context was made): not yet receiving, and no entity that waits for mail
        (a subscription, a service's server or client, a group member, a face's endpoint)."""
        with self._lock:
            if self._receiving or self._shut_down:
                return
        if (
            self._group_wants
            or self._subscription_handler.serves_any()
            or self._service_handler.serves_any()
            or self._router.serves_any()
        ):
            return
        if self._receiver.disconnect():
            _log.debug("nothing receives on this context: its receiving session given back")

    def __repr__(self) -> str:
        state = "shut down" if self._shut_down else "running"
        return f"<emailmw.Context {self.options.transport} {state}>"

    @property
    def address(self) -> str:
        """The mail address this context receives at (its account), where routed
        messages for its hub are sent."""
        user = self.options.user
        if user is not None and "@" in user.username:
            return user.username
        return self.options.recipients.from_

    @property
    def router(self) -> Router:
        """The routing handler of this context's hub (``docs/addressing.md``): the faces
        (Stem cells, YMP hosts, floctrl nodes) register their endpoints on it."""
        return self._router

    @property
    def sender(self) -> EmailSender:
        return self._sender

    @property
    def peers(self) -> Peers | None:
        """What the readers of the accounts this context sends to said they read
        (``docs/batching.md``); None in process (no encoding to negotiate)."""
        return self._peers

    def accepts(self, recipients: Sequence[str], feature: str) -> bool:
        """Whether every reader of ``recipients`` said it reads ``feature`` (``batch``,
        ``parts``, ``zstd``): asked, never waited for (``docs/batching.md``). In process:
        True."""
        return self._peers is None or self._peers.accept(list(recipients), feature)

    def wait_for_readers(
        self,
        feature: str = "batch",
        timeout: float | None = None,
        recipients: Sequence[str] | None = None,
    ) -> bool:
        """Wait until every reader of ``recipients`` (default: this context's ``to``,
        ``cc`` and ``bcc``) said it reads ``feature`` (``batch``, ``parts``, ``zstd``):
        until then this context sends them single, uncompressed messages
        (``docs/batching.md``). Asks them (a probe) when they have not said; at most
        ``timeout`` seconds (None: the configured ``timeout``). In process: True at once."""
        if self._peers is None:
            return True
        own = self.options.recipients
        found = recipients if recipients is not None else (*own.to, *own.cc, *own.bcc)
        wait = self.options.timeout if timeout is None else timeout
        return self._peers.accept(list(found), feature, wait=wait)

    def claims(self, wants: Callable[[Head], bool], *, add: bool = True) -> None:
        """A delivery group of this context claims the inbox mail ``wants`` says yes to
        (``add``), or no longer does: this context's own polling thread leaves that mail to
        the group's (which decides on it, its signature and replay check included)."""
        with self._lock:
            if add:
                self._group_wants = (*self._group_wants, wants)
            else:
                self._group_wants = tuple(w for w in self._group_wants if w is not wants)

    def _claimed_by_a_group(self, email: Email) -> bool:
        wants = self._group_wants
        if not wants:
            return False
        head = Head(email.subject, route_to=email.headers.get("Route-To", ""))
        return any(want(head) for want in wants)

    @property
    def peer_observer(self) -> Handler | None:
        """The polling handler that tells senders what this context reads (a group
        member's polling thread runs it too)."""
        return None if self._peers is None else self._peers.observe

    @property
    def budget(self) -> ReceiveBudget:
        """What this context holds of received mail not settled yet, against its bounds
        (``queue-bytes``, ``queue-limit``): its receivers stop fetching when it is full."""
        return self._budget

    @property
    def receiver(self) -> EmailReceiver:
        return self._receiver

    def start_receiving(self) -> None:
        """Start handing out mail to the entities. Happens by itself the first time one of
        them waits for or looks for mail (``wait_for_*``, a wait set, ``has_*``, ``get_*``,
        a callback server's thread, spinning, a client's request), so that every entity
        created before that
        sees the mail waiting in the mailbox: with a ``state-file``, what a previous process
        had not taken. Idempotent, thread-safe."""
        if self._receiving:
            return
        with self._lock:
            if self._receiving or self._shut_down:
                return
            self._receiving = True
            self._polling.start()

    def ok(self) -> bool:
        """True until :meth:`shutdown` (or a signal asked for it; a failing receiver does
        not change it: see :attr:`receive_error`)."""
        return not (self._signalled or self._stopping.is_set())

    def on_shutdown(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when this context starts shutting down (at once if it has);
        quick, on the thread that shuts it down (a signal handler's too): executors wake
        their spin here. Thread-safe."""
        with self._lock:
            if not self._stopping.is_set():
                self._on_shutdown.append(callback)
                return
        callback()

    def wait_for_shutdown(self, timeout: float | None = None) -> bool:
        """Block until this context starts shutting down, at most ``timeout`` seconds;
        whether it has."""
        return self._stopping.wait(timeout)

    def request_shutdown(self) -> None:
        """Start shutting down without blocking (what SIGINT does): :meth:`ok` turns
        False, waits end, executors wake; :meth:`shutdown` then releases everything (at
        exit, if nobody calls it). Thread-safe; a signal handler must not call it (it takes
        locks the interrupted thread may hold): :func:`init`'s handlers have it called on
        a thread of their own."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        callbacks, self._on_shutdown = self._on_shutdown, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - the others are still told
                _log.exception("a shutdown callback failed")

    @property
    def receive_error(self) -> Exception | None:
        """The failure receiving is in now, a :class:`TransportError` such as
        :class:`AuthenticationError` (a revoked password) or :class:`ReceiveError` (a
        deleted folder); None while receiving works. The polling thread retries all along
        and logs one ERROR per change, so this is how an application learns of it."""
        return self._polling.error

    def wait_for_receive_error(self, timeout: float | None = None) -> Exception | None:
        """Block until receiving fails, at most ``timeout`` seconds (None: no limit); the
        failure, or None if receiving still works at the timeout. Thread-safe."""
        self.start_receiving()
        return self._polling.wait_for_error(timeout)

    def check_guarantee(self, guarantee: str | None) -> str:
        """The send guarantee an entity uses: ``guarantee``, else the configured
        ``send-guarantee``; raises ``ValueError`` for an unknown one or for ``spool`` without
        a spool directory."""
        chosen = self.options.send_guarantee if guarantee is None else guarantee
        if chosen not in SEND_GUARANTEES:
            raise InvalidArgumentError(
                f"guarantee must be one of {', '.join(SEND_GUARANTEES)}, got {guarantee!r}"
            )
        if chosen == "spool" and self.options.spool is None and not self.options.intraprocess:
            raise ConfigError(
                "the spool guarantee needs a spool directory",
                source=self.options.source,
                key="email.spool",
            )
        return chosen

    @property
    def security(self) -> Security:
        """This context's security policy (``docs/security.md``): its identity, its
        ``counts`` of received mail by status (verified, unsigned, invalid, untrusted,
        replayed, denied, undecryptable, quarantined)."""
        return self._security

    def check_permission(self, action: str, name: str) -> None:
        """Raise :class:`~emailmw.PermissionDeniedError` unless this context's identity may
        ``action`` (publish, subscribe, call, serve) ``name``."""
        self._security.check_local(action, name)

    def _check_open(self) -> None:
        if self._shut_down:
            raise ClosedError("context is shut down")

    # ------------------------------------------------------------- what the context owns
    # Entities register through these, never through the context's fields: a new kind of
    # entity needs no other module's private state. All thread-safe.

    def register_entity(self, entity: _Closeable) -> None:
        """Own ``entity``: :meth:`shutdown` closes it. Raises :class:`ClosedError` once the
        context is shut down."""
        with self._lock:
            self._check_open()
            self._entities.add(entity)

    def unregister_entity(self, entity: _Closeable) -> None:
        with self._lock:
            self._entities.discard(entity)

    def register_subscription(self, topic: str, sink: MessageSink) -> None:
        """Hand ``sink`` every message published on ``topic``."""
        self._subscription_handler.register(topic, sink)

    def unregister_subscription(self, topic: str, sink: MessageSink) -> None:
        self._subscription_handler.unregister(topic, sink)

    def register_server(self, service: str, sink: RequestSink) -> None:
        """Hand ``sink`` every request of ``service``."""
        self._service_handler.register_server(service, sink)

    def unregister_server(self, service: str, sink: RequestSink) -> None:
        self._service_handler.unregister_server(service, sink)

    def register_client(self, gid: int, sink: ResponseSink) -> None:
        """Hand ``sink`` the responses to the client with GID ``gid``."""
        self._service_handler.register_client(gid, sink)

    def unregister_client(self, gid: int, sink: ResponseSink) -> None:
        self._service_handler.unregister_client(gid, sink)

    def register_publisher(self, gid: int, sink: AckSink) -> None:
        """Hand ``sink`` the acknowledgements of the messages of publisher ``gid``."""
        self._ack_handler.register(gid, sink)

    def unregister_publisher(self, gid: int, sink: AckSink) -> None:
        self._ack_handler.unregister(gid, sink)

    def acknowledge(self, email: Email, delivery_count: int, *, member: str | None = None) -> None:
        """Send the acknowledgement of published ``email`` (which asked for one) to its
        publisher: this context (and group ``member``) is done with it."""
        subscriber = self.address + (f" member {member}" if member else "")
        ack = ack_email(
            email,
            subscriber=subscriber,
            delivery_count=delivery_count,
            from_=self.options.recipients.from_,
            timestamp_ns=time.time_ns(),
        )
        try:
            self._sender.send(ack, guarantee="memory")
        except EmailMWError as exc:
            _log.warning("acknowledging %s to %s failed: %s", email.message_id, ack.to, exc)

    def shared(self, key: str, create: Callable[[], S]) -> S:
        """The one object of ``key`` on this context, made by ``create()`` on first use:
        what a layer above needs once per context (the graph's announcer), without this
        layer knowing it. Closed at :meth:`shutdown`, before the entities. Raises
        :class:`ClosedError` once the context is shut down. Thread-safe (of racing
        creations, one wins and the others are closed)."""
        with self._lock:
            self._check_open()
            existing = self._shared.get(key)
        if existing is not None:
            return existing  # type: ignore[return-value]
        created = create()  # not under the lock: creating may register entities
        with self._lock:
            chosen = self._shared.setdefault(key, created) if not self._shut_down else None
        if chosen is not created:
            created.close()
            if chosen is None:
                raise ClosedError("context is shut down")
        return chosen  # type: ignore[return-value]

    def group_store(self, group: str) -> GroupStore:
        """A new connection to the store where this account's delivery-mode group
        ``group`` keeps its state (``docs/delivery-modes.md``). Raises
        :class:`~emailmw.ConfigError` where the transport has none."""
        if self._group_store is None:
            raise ConfigError(
                f"{type(self._receiver).__name__} has no group modes (stateful, stateless): "
                "use the native, curl or intraprocess transport"
            )
        return self._group_store(group)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every email sent so far was accepted by the server."""
        return self._sender.flush(timeout)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Close all entities, flush and close the sender, stop polling. Idempotent; from
        any thread, a callback's too."""
        self.request_shutdown()
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
            if self._give_back is not None:
                self._give_back.cancel()
            entities = list(self._entities)
            shared, self._shared = list(self._shared.values()), {}
        for item in shared:
            item.close()
        for entity in entities:
            entity.close()
        self._router.close(timeout)  # (routed emails waiting for their hop: left unsettled)
        try:
            if not self._sender.flush(timeout):
                _log.warning("emails still unsent after %.1f s at shutdown", timeout)
        except SendError as exc:  # refusals of raw sends: reported, not raised from here
            _log.error("at shutdown: %s", exc)
        finally:
            self._polling.stop(timeout)
            self._sender.close()
            self._receiver.close()
            self._security.close()
        _log.debug("context shut down")

    def close(self) -> None:
        """:meth:`shutdown`."""
        self.shutdown()


class IntraprocessNetwork(_Network):
    """In-process mail between several addresses, for tests and embedded use of routed
    messages (``docs/addressing.md``): each address has a mailbox, and a sender of the
    network hands an email to the mailbox of each of its recipients (To, Cc, Bcc), as a
    mail server would. An unknown recipient is refused at once with
    :class:`~emailmw.SendError`. Thread-safe.

    >>> net = IntraprocessNetwork()
    >>> lab = net.context("lab@hubs.test")  # doctest: +SKIP
    """

    def context(self, address: str, config: Mapping[str, Any] | None = None) -> Context:
        """A :class:`~emailmw.Context` receiving at ``address`` on this network;
        ``config``: more keys of the ``email:`` section (``routing``, ``security``...)."""
        options = {"intraprocess": True, "from": address, **(config or {})}
        return Context(options, transport=self.transport(address))


class SignalHandlerOptions(enum.Enum):
    """Which signals :func:`init` handles (rclpy's): SIGINT and SIGTERM start shutting the
    default context down (spinning returns); SIGINT then raises ``KeyboardInterrupt`` as
    Python's default handler does."""

    NO = 0
    SIGINT = 1
    SIGTERM = 2
    ALL = 3


_default_lock = threading.Lock()
_default: Context | None = None
_installed: dict[int, Any] = {}  # signal number -> the handler emailmw replaced
_at_exit_registered = False


def _on_signal(signum: int, frame: Any) -> None:
    """SIGINT and SIGTERM: the default context starts shutting down (every spin returns),
    then the handler that was there runs (SIGINT's raises ``KeyboardInterrupt``; SIGTERM's
    default, ending the process, does not: the program ends as its code says)."""
    context = _default
    if context is not None:
        # (the handler runs between two bytecodes of the main thread, which may hold the
        # lock a wait set sleeps on: the shutdown's wake-ups run on another thread)
        context._signalled = True
        signalsafe.call_soon(context.request_shutdown)
    previous = _installed.get(signum)
    if context is None and previous == signal.SIG_DFL:
        # emailmw was shut down on another thread, which cannot put the handler back
        # (Python sets handlers on the main thread only): the signal does what it did
        # before emailmw (was: SIGTERM did nothing once emailmw was shut down that way)
        signal.signal(signum, signal.SIG_DFL)
        _installed.pop(signum, None)
        os.kill(os.getpid(), signum)
        return
    if callable(previous):
        previous(signum, frame)


def _install(options: SignalHandlerOptions) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # Python takes signals on the main thread only
    wanted = {
        SignalHandlerOptions.NO: (),
        SignalHandlerOptions.SIGINT: (signal.SIGINT,),
        SignalHandlerOptions.SIGTERM: (signal.SIGTERM,),
        SignalHandlerOptions.ALL: (signal.SIGINT, signal.SIGTERM),
    }[options]
    if wanted:
        signalsafe.start()
    for signum in wanted:
        if signum not in _installed:
            _installed[signum] = signal.signal(signum, _on_signal)


def _uninstall() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_installed.items()):
        signal.signal(signum, previous)
        del _installed[signum]


def _at_exit() -> None:
    context = _default
    if context is not None:
        context.shutdown(timeout=2.0)


def init(
    config: ConfigLike = None,
    *,
    args: Sequence[str] | None = None,
    context: Context | None = None,
    domain_id: int | None = None,
    signal_handler_options: SignalHandlerOptions | None = None,
) -> Context:
    """Create the default context (rclpy's ``rclpy.init``): ``config`` is the mail account
    (a file, a mapping, :class:`~emailmw.Options`; default: ``EMAILMW_CONFIG_FILE``,
    ``./email.yml``, ... else in-process only); ``args``' ``--ros-args`` (default, as in
    rclpy: ``sys.argv``'s) apply to every node. With ``context`` (one created with
    ``Context(...)``), that one gets the arguments instead and stays the caller's. SIGINT
    and SIGTERM start shutting the default context down (``signal_handler_options``).
    Returns the context, a context manager that shuts it down. Raises
    :class:`~emailmw.ContextAlreadyInitializedError` while a default context is running
    (call :func:`shutdown` first)."""
    global _default, _at_exit_registered
    del domain_id  # the mail account is the domain
    if args is None:
        args = sys.argv
    _install_excepthook()  # (first: a mistake in the account below is one line too)
    if context is not None:
        context.ros_args = context.ros_args.merged(parse_ros_args(args))
        set_levels_from_args(context.ros_args.log_levels)
        return context
    with _default_lock:
        if _default is not None and _default.ok():
            raise ContextAlreadyInitializedError(
                "emailmw.init() was already called; call emailmw.shutdown() first"
            )
        _default = Context(config, args=args)
        created = _default
        if not _at_exit_registered:
            atexit.register(_at_exit)
            _at_exit_registered = True
    if created.options.intraprocess and config is None:
        # (on standard error itself: the emailmw logger has only a NullHandler until the
        # application sets logging up, and a talker and listener that each talk to
        # themselves only must not look like mail that does not come)
        print(NO_ACCOUNT_LINE, file=sys.stderr, flush=True)
    _install(signal_handler_options or SignalHandlerOptions.ALL)
    return created


def _install_excepthook() -> None:
    """A program that called :func:`init` and ends on an uncaught mistake in its setup
    (:class:`~emailmw.ConfigError`: a configuration, an extra not installed; or its account:
    :class:`~emailmw.AuthenticationError`, :class:`~emailmw.TLSError`, a server
    :class:`~emailmw.ConnectError` cannot reach) says it in one line and exits with status
    1, as the command line does; anything else goes to the hook that was there (rclpy
    installs one too)."""
    previous = sys.excepthook
    if getattr(previous, "_emailmw", False):
        return

    def hook(kind: type[BaseException], value: BaseException, trace: Any) -> None:
        if isinstance(value, ConfigError | AuthenticationError | TLSError | ConnectError):
            print(f"emailmw: error: {value}", file=sys.stderr, flush=True)
            return  # (the interpreter exits with status 1 after the hook)
        previous(kind, value, trace)

    hook._emailmw = True  # type: ignore[attr-defined]
    sys.excepthook = hook


#: what :func:`init` says on standard error when it finds no mail account
NO_ACCOUNT_LINE: Final = (
    "emailmw: no mail account configured: this process talks to itself only. Name one "
    "with EMAILMW_CONFIG_FILE=FILE, ./email.yml, init(config) or 'emailmw run ... --config "
    "FILE' (for the local test server: python -m emailmw.testing.mailserver config alice "
    "> email.yml)"
)


def shutdown(*, context: Context | None = None, uninstall_handlers: bool | None = None) -> None:
    """Shut ``context`` down (default: the default context; rclpy's ``rclpy.shutdown``).
    Raises :class:`~emailmw.ContextNotInitializedError` when there is no default context.
    A context a signal already began to shut down is shut down without complaint."""
    global _default
    if context is not None and context is not _default:
        context.shutdown()
        return
    with _default_lock:
        found, _default = _default, None
    if found is None:
        raise ContextNotInitializedError("emailmw.shutdown() without emailmw.init()")
    if uninstall_handlers is not False:
        _uninstall()
    found.shutdown()


def try_shutdown(*, context: Context | None = None, uninstall_handlers: bool | None = None) -> None:
    """:func:`shutdown`, doing nothing where there is nothing to shut down."""
    with contextlib.suppress(ContextNotInitializedError):
        shutdown(context=context, uninstall_handlers=uninstall_handlers)


def ok(*, context: Context | None = None) -> bool:
    """Whether ``context`` (default: the default context) exists and is not shutting down."""
    found = context if context is not None else _default
    return found is not None and found.ok()


def get_rmw_implementation_identifier() -> str:
    """The middleware under the ROS API: ``rmw_email`` (emailmw is wire-compatible with it)."""
    return "rmw_email"


def get_default_context() -> Context:
    """The default context; raises :class:`~emailmw.ContextNotInitializedError` without one."""
    context = _default
    if context is None:
        raise ContextNotInitializedError(
            "no default context: call emailmw.init() first, or pass context="
        )
    return context


def resolve(context: Context | None) -> Context:
    context = context if context is not None else get_default_context()
    context._check_open()
    return context
