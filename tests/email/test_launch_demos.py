"""#60: upstream launch files, renamed only, run over the real server with demo programs
in the shape of ROS 2's demo_nodes_py (rclpy renamed to emailmw): ros2/demos'
``add_two_ints_launch.py`` (a server and a client; the launch ends when the client ends,
through ``RegisterEventHandler(OnProcessExit(... EmitEvent(Shutdown())))``), ros2launch's
``example.launch.py`` (node names from an environment variable) and launch_ros'
``pub_sub_launch.py`` (a script that runs its description with ``LaunchService``, ended by
Ctrl-C), and the YAML form of demo_nodes_cpp's talker_listener launch. The launch files
and programs here were written from the upstream files' text, with only the renaming
(``launch`` -> ``emailmw.launch``, ``launch_ros`` -> ``emailmw.launch_ros``, ``rclpy`` ->
``emailmw``) and the package name (the programs' directory) changed; each node reads the
account ``--config`` gives the launch."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from emailmw.testing.mailserver import MailServer

from ..helpers import deadline_loop
from .helpers import write_config

pytestmark = pytest.mark.mailserver

ADD_TWO_INTS_SERVER = """\
import emailmw
from emailmw.executors import ExternalShutdownException
from emailmw.node import Node
from emailmw.example_interfaces.srv import AddTwoInts


class AddTwoIntsServer(Node):

    def __init__(self):
        super().__init__('add_two_ints_server')
        self.srv = self.create_service(AddTwoInts, 'add_two_ints', self.add_two_ints_callback)

    def add_two_ints_callback(self, request, response):
        response.sum = request.a + request.b
        self.get_logger().info('Incoming request\\na: %d b: %d' % (request.a, request.b))
        return response


def main(args=None):
    try:
        emailmw.init(args=args)
        node = AddTwoIntsServer()
        emailmw.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == '__main__':
    main()
"""

ADD_TWO_INTS_CLIENT = """\
import emailmw
from emailmw.example_interfaces.srv import AddTwoInts


def main(args=None):
    emailmw.init(args=args)
    node = emailmw.create_node('add_two_ints_client')
    cli = node.create_client(AddTwoInts, 'add_two_ints')
    req = AddTwoInts.Request()
    req.a = 2
    req.b = 3
    while not cli.wait_for_service(timeout_sec=1.0):
        node.get_logger().info('service not available, waiting again...')
    future = cli.call_async(req)
    emailmw.spin_until_future_complete(node, future)
    result = future.result()
    node.get_logger().info('Result of add_two_ints: for %d + %d = %d' % (req.a, req.b, result.sum))
    node.destroy_node()
    emailmw.shutdown()


if __name__ == '__main__':
    main()
"""

TALKER = """\
import emailmw
from emailmw.executors import ExternalShutdownException
from emailmw.node import Node
from emailmw.std_msgs.msg import String


class Talker(Node):

    def __init__(self):
        super().__init__('talker')
        self.i = 0
        self.pub = self.create_publisher(String, 'chatter', 10)
        self.tmr = self.create_timer(1.0, self.timer_callback)

    def timer_callback(self):
        msg = String()
        msg.data = 'Hello World: {0}'.format(self.i)
        self.i += 1
        self.get_logger().info('Publishing: "{0}"'.format(msg.data))
        self.pub.publish(msg)


def main(args=None):
    try:
        emailmw.init(args=args)
        node = Talker()
        emailmw.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == '__main__':
    main()
"""

LISTENER = """\
import emailmw
from emailmw.executors import ExternalShutdownException
from emailmw.node import Node
from emailmw.std_msgs.msg import String


class Listener(Node):

    def __init__(self):
        super().__init__('listener')
        self.sub = self.create_subscription(String, 'chatter', self.chatter_callback, 10)

    def chatter_callback(self, msg):
        self.get_logger().info('I heard: [%s]' % msg.data)


def main(args=None):
    try:
        emailmw.init(args=args)
        node = Listener()
        emailmw.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == '__main__':
    main()
"""

#: ros2/demos: demo_nodes_cpp/launch/services/add_two_ints_launch.py, renamed
ADD_TWO_INTS_LAUNCH = """\
\"\"\"Launch a add_two_ints_server and a (synchronous) add_two_ints_client.\"\"\"

import emailmw.launch as launch
import emailmw.launch_ros.actions


def generate_launch_description():
    server = emailmw.launch_ros.actions.Node(
        package='PROGRAMS', executable='add_two_ints_server', output='screen')
    client = emailmw.launch_ros.actions.Node(
        package='PROGRAMS', executable='add_two_ints_client', output='screen')
    return launch.LaunchDescription([
        server,
        client,
        # TODO(wjwwood): replace this with a `required=True|False` option on ExecuteProcess().
        # Shutdown launch when client exits.
        launch.actions.RegisterEventHandler(
            event_handler=launch.event_handlers.OnProcessExit(
                target_action=client,
                on_exit=[launch.actions.EmitEvent(event=launch.events.Shutdown())],
            )),
    ])
"""

#: ros2/launch_ros: ros2launch/examples/example.launch.py, renamed
EXAMPLE_LAUNCH = """\
\"\"\"Launch a talker and a listener.\"\"\"

from emailmw.launch import LaunchDescription
import emailmw.launch.actions
import emailmw.launch.substitutions
import emailmw.launch_ros.actions


def generate_launch_description():
    \"\"\"Launch a talker and a listener.\"\"\"
    return LaunchDescription([
        emailmw.launch.actions.DeclareLaunchArgument(
            'node_prefix',
            default_value=[emailmw.launch.substitutions.EnvironmentVariable('USER'), '_'],
            description='prefix for node names'),
        emailmw.launch_ros.actions.Node(
            package='PROGRAMS', executable='talker', output='screen',
            name=[emailmw.launch.substitutions.LaunchConfiguration('node_prefix'), 'talker']),
        emailmw.launch_ros.actions.Node(
            package='PROGRAMS', executable='listener', output='screen',
            name=[emailmw.launch.substitutions.LaunchConfiguration('node_prefix'), 'listener']),
    ])
"""

#: ros2/launch_ros: launch_ros/examples/pub_sub_launch.py, renamed (a script)
PUB_SUB_LAUNCH = """\
\"\"\"Launch a talker and a listener.\"\"\"

import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))  # noqa
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'launch'))  # noqa

from emailmw.launch import LaunchDescription  # noqa: E402
from emailmw.launch import LaunchIntrospector  # noqa: E402
from emailmw.launch import LaunchService  # noqa: E402

import emailmw.launch_ros.actions  # noqa: E402


def main(argv=sys.argv[1:]):
    \"\"\"Run demo nodes via launch.\"\"\"
    ld = LaunchDescription([
        emailmw.launch_ros.actions.Node(
            package='PROGRAMS', executable='talker', output='screen',
            remappings=[('chatter', 'my_chatter')]),
        emailmw.launch_ros.actions.Node(
            package='PROGRAMS', executable='listener', output='screen',
            remappings=[('chatter', 'my_chatter')]),
    ])

    print('Starting introspection of launch description...')
    print('')

    print(LaunchIntrospector().format_launch_description(ld))

    print('')
    print('Starting launch of launch description...')
    print('')

    # ls = LaunchService(debug=True)
    ls = LaunchService()
    ls.include_launch_description(ld)
    return ls.run()


if __name__ == '__main__':
    main()
"""

#: ros2/demos: demo_nodes_cpp/launch/topics/talker_listener_launch.yaml, renamed
TALKER_LISTENER_YAML = """\
launch:
  - node:
      pkg: "PROGRAMS"
      exec: "talker"
      output: "screen"
  - node:
      pkg: "PROGRAMS"
      exec: "listener"
      output: "screen"
"""


@pytest.fixture
def demo(mailserver: MailServer, account: Callable[[], str], tmp_path: Path) -> Path:
    """The programs' directory (the launch files' package) and ``email.yml`` beside it:
    one account, as every node of an rmw_email launch shares."""
    programs = tmp_path / "programs"
    programs.mkdir()
    for name, text in (("add_two_ints_server", ADD_TWO_INTS_SERVER),
                       ("add_two_ints_client", ADD_TWO_INTS_CLIENT),
                       ("talker", TALKER), ("listener", LISTENER)):  # fmt: skip
        (programs / f"{name}.py").write_text(text)
    write_config(tmp_path / "email.yml", mailserver.config(account()))
    return programs


class Terminal:
    """A command run in a terminal of its own (a pseudo-terminal it has as its controlling
    terminal, as in a shell): Ctrl-C is the terminal's, delivered to its whole foreground
    process group, as a user's Ctrl-C is."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()

        def controlling() -> None:  # (in the child, after setsid: this terminal is its own)
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
            env={**os.environ, **(env or {})}, start_new_session=True,
            preexec_fn=controlling,  # noqa: PLW1509 - a test's child, before any thread runs
        )  # fmt: skip
        os.close(slave)
        self.master = master
        self.seen = ""

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # (EIO: every process holding the terminal ended)
            return False
        if not data:
            return False
        self.seen += data.decode(errors="replace").replace("\r\n", "\n")
        return True

    def until(self, text: str, timeout: float) -> str:
        """What it printed up to now, once ``text`` is there."""
        more = deadline_loop(timeout)
        while text not in self.seen and more() and self._read(0.5):
            pass
        if text not in self.seen:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise AssertionError(f"{text!r} not printed within {timeout} s:\n{self.seen}")
        return self.seen

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def end(self, timeout: float) -> str:
        """Everything it printed, once it ended (within ``timeout`` s)."""
        more = deadline_loop(timeout)
        while self.process.poll() is None and more():
            self._read(0.2)
        while self._read(0.2) and self.process.poll() is None:
            pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise AssertionError(f"still running after {timeout} s:\n{self.seen}")
        os.close(self.master)
        return self.seen


def _launch(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Terminal:
    return Terminal([sys.executable, "-m", "emailmw", "launch", *args, "--config", "email.yml"],
                    cwd, env)  # fmt: skip


def test_add_two_ints_launch_ends_when_its_client_ends(demo: Path) -> None:
    path = demo.parent / "add_two_ints_launch.py"
    path.write_text(ADD_TWO_INTS_LAUNCH.replace("PROGRAMS", str(demo)))
    launch = _launch(str(path), cwd=demo.parent)
    launch.until("Result of add_two_ints: for 2 + 3 = 5", 120)
    out = launch.end(60)
    assert launch.process.returncode == 0, out
    lines = out.splitlines()
    assert any(line.startswith("[INFO] [add_two_ints_client-2]: process has finished cleanly")
               for line in lines), out  # fmt: skip
    # the server, which would spin for ever, was stopped by the shutdown
    assert any(line.startswith("[INFO] [add_two_ints_server-1]: process has finished cleanly")
               for line in lines), out  # fmt: skip


@pytest.mark.parametrize("form", ["example.launch.py", "talker_listener_launch.yaml"])
def test_talker_and_listener_launches_hear_each_other_until_ctrl_c(demo: Path, form: str) -> None:
    """A user's Ctrl-C reaches every process once (the terminal's; the launch sends no
    second SIGINT, as ros2 launch): each ends cleanly."""
    text = EXAMPLE_LAUNCH if form.endswith(".py") else TALKER_LISTENER_YAML
    path = demo.parent / form
    path.write_text(text.replace("PROGRAMS", str(demo)))
    launch = _launch(str(path), cwd=demo.parent, env={"USER": "tester"})
    talker, listener = ("tester_talker-1", "tester_listener-2") if form.endswith(".py") else (
        "talker-1", "listener-2")  # fmt: skip
    seen = launch.until("I heard: [Hello World: 1]", 120)
    heard = next(line for line in seen.splitlines() if "I heard: [Hello World: 1]" in line)
    assert heard.startswith(f"[{listener}] "), seen
    started = time.monotonic()
    launch.ctrl_c()
    out = launch.end(60)
    assert time.monotonic() - started < 30
    assert launch.process.returncode == 0, out
    assert "[WARNING] [launch]: user interrupted with ctrl-c (SIGINT)" in out
    for label in (talker, listener):
        assert f"[INFO] [{label}]: process has finished cleanly" in out, out


def test_a_launch_script_runs_its_description_with_launch_service(demo: Path) -> None:
    path = demo.parent / "pub_sub_launch.py"
    path.write_text(PUB_SUB_LAUNCH.replace("PROGRAMS", str(demo)))
    script = Terminal([sys.executable, str(path)], demo.parent,
                      {"EMAILMW_CONFIG_FILE": str(demo.parent / "email.yml")})  # fmt: skip
    seen = script.until("I heard: [Hello World: 1]", 120)
    assert "├── Node(package=" in seen, seen  # (LaunchIntrospector's tree)
    assert "executable='talker'" in seen, seen
    assert "Starting launch of launch description..." in seen
    script.ctrl_c()
    out = script.end(60)
    assert script.process.returncode == 0, out
    assert "[INFO] [talker-1]: process has finished cleanly" in out, out
