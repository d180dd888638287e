"""``emailmw run`` and ``emailmw launch`` as ros2's: programs of a directory or an
installed package with their arguments and ``--ros-args``; YAML and XML launch files
whose nodes start with their names, namespaces, parameters and remappings, each line
prefixed with its process; what is not supported is one line. (Nodes here talk
intraprocess: what is tested is how they are started.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emailmw._cli.launch import plan
from emailmw._core.errors import EmailMWError

HELLO = """\
import sys
import time

import emailmw
from emailmw.node import Node

emailmw.init({"intraprocess": True}, args=sys.argv)
node = Node("hello", automatically_declare_parameters_from_overrides=True)
values = {n: p.value for n, p in node.get_parameters_by_prefix("").items()
          if n != "use_sim_time"}
print(node.get_fully_qualified_name(), values, node.resolve("chatter"), sys.argv[1:2],
      flush=True)
if node.get_parameters_by_prefix("").get("linger"):
    time.sleep(60)
emailmw.shutdown()
"""


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emailmw", *args], capture_output=True,
                          text=True, timeout=60, check=False, cwd=cwd)  # fmt: skip


@pytest.fixture
def programs(tmp_path: Path) -> Path:
    directory = tmp_path / "programs"
    directory.mkdir()
    (directory / "hello.py").write_text(HELLO)
    return directory


def test_run_starts_a_directory_s_program_or_a_package_s_console_script(
    programs: Path,
) -> None:
    out = _cli("run", str(programs), "hello", "first", "--ros-args", "-r", "__node:=x",
               "-r", "__ns:=/robot", "-p", "k:=3", "-r", "chatter:=talk")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "/robot/x {'k': 3} /robot/talk ['first']"
    version = _cli("run", "emailmw", "emailmw", "--version")
    assert version.returncode == 0
    assert version.stdout.startswith("emailmw ")
    for args, words in (
        (("nopkg", "x"), "no directory and no installed Python package named 'nopkg'"),
        (("emailmw", "x"), "package 'emailmw' has no executable 'x' (its executables: emailmw)"),
        ((str(programs), "bye"), "no bye or bye.py in the directory"),
    ):
        failed = _cli("run", *args)
        assert failed.returncode == 1
        assert failed.stderr.startswith("emailmw: error: ")
        assert words in failed.stderr
        assert failed.stderr.count("\n") == 1


ACCOUNT = """\
import sys

from emailmw._core.config import load_options

options = load_options(None)  # (what init() would find: the account, or none)
print("account", "none" if options.intraprocess else options.user.username, sys.argv[1:],
      flush=True)
"""

CONFIG = """\
email:
  user: {url-imap: "imaps://127.0.0.1:9", url-smtp: "smtps://127.0.0.1:9",
         username: alice@example.test, password: secret}
  recipients: {to: bob@example.test}
"""


def test_the_account_given_to_run_and_launch_reaches_every_program(
    programs: Path, tmp_path: Path
) -> None:
    """#60: ``--config`` before or after the verb, and after the executable as a ROS user
    writes it, is the account of the programs ``run`` and ``launch`` start (was: they
    started with the user's environment only, talked to themselves, and said nothing)."""
    (programs / "account.py").write_text(ACCOUNT)
    (tmp_path / "alice.yml").write_text(CONFIG)
    for args in (
        ("run", str(programs), "account", "--config", "alice.yml", "x"),
        ("run", str(programs), "account", "x", "--config=alice.yml"),
        ("--config", "alice.yml", "run", str(programs), "account", "x"),
        ("run", "--config", "alice.yml", str(programs), "account", "x"),
    ):
        out = _cli(*args, cwd=tmp_path)
        assert (out.returncode, out.stdout) == (0, "account alice@example.test ['x']\n"), args
    # (from --ros-args on, arguments are passed on as they are)
    out = _cli("run", str(programs), "account", "--ros-args", "--config", "x", cwd=tmp_path)
    assert out.stdout == "account none ['--ros-args', '--config', 'x']\n"
    missing = _cli("run", str(programs), "account", "--config", "nofile.yml", cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr == (
        "emailmw: error: --config nofile.yml: no such file (give the account's email.yml)\n"
    )
    launch = tmp_path / "two.launch.xml"
    launch.write_text(f'<launch><node pkg="{programs}" exec="account" name="a"/>'
                      f'<node pkg="{programs}" exec="account" name="b"/></launch>')  # fmt: skip
    out = _cli("launch", str(launch), "--config", "alice.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    heard = [line for line in out.stdout.splitlines() if " account " in line]
    assert sorted(heard) == [
        "[a-1] account alice@example.test ['--ros-args', '-r', '__node:=a']",
        "[b-2] account alice@example.test ['--ros-args', '-r', '__node:=b']",
    ]


def test_a_program_without_an_account_says_so_on_stderr(tmp_path: Path) -> None:
    """#60: ``init()`` without any mail account says so in one line on standard error,
    with no logging set up (was: a warning to the emailmw logger, whose only handler is a
    NullHandler: nothing)."""
    program = tmp_path / "alone.py"
    program.write_text("import emailmw\nemailmw.init()\nemailmw.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if "CONFIG_FILE" not in k}
    env["HOME"] = str(tmp_path)
    out = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                         timeout=60, check=False, cwd=tmp_path, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("emailmw: no mail account configured: this process talks to")
    assert "EMAILMW_CONFIG_FILE" in out.stderr
    assert "--config" in out.stderr


YAML = """\
launch:
- arg: {name: speed, default: "2"}
- node:
    pkg: PROGRAMS
    exec: hello
    name: left
    namespace: robot
    args: "alpha"
    param:
    - {name: speed, value: $(var speed)}
    - {name: mode, value: fast}
    - {name: gains, value: [1, 2]}
    remap:
    - {from: chatter, to: /left/chatter}
- node: {pkg: PROGRAMS, exec: hello, name: right}
"""

XML = """\
<launch>
  <arg name="speed" default="2"/>
  <node pkg="PROGRAMS" exec="hello" name="left" namespace="robot" args="alpha">
    <param name="speed" value="$(var speed)"/>
    <param name="mode" value="fast"/>
    <param name="gains" value="[1, 2]"/>
    <remap from="chatter" to="/left/chatter"/>
  </node>
  <node pkg="PROGRAMS" exec="hello" name="right"/>
</launch>
"""


@pytest.mark.parametrize(("form", "text"), [("yaml", YAML), ("xml", XML)])
def test_launch_starts_each_node_as_the_file_says(
    programs: Path, tmp_path: Path, form: str, text: str
) -> None:
    """Both forms: the arg's default overridden from the command line, a node's name,
    namespace, arguments, parameters (typed) and remapping; output lines prefixed with
    their process; ros2 launch's lines when each starts and ends."""
    path = tmp_path / f"two.launch.{form}"
    path.write_text(text.replace("PROGRAMS", str(programs)))
    out = _cli("launch", str(path), "speed:=5")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert ("[left-1] /robot/left {'speed': 5, 'mode': 'fast', 'gains': [1, 2]} "
            "/left/chatter ['alpha']") in lines  # fmt: skip
    assert "[right-2] /right {} /chatter ['--ros-args']" in lines
    for label in ("left-1", "right-2"):
        assert any(line.startswith(f"[INFO] [{label}]: process started with pid [")
                   for line in lines)  # fmt: skip
        assert any(line.startswith(f"[INFO] [{label}]: process has finished cleanly")
                   for line in lines)  # fmt: skip


def test_what_launch_does_not_support_is_one_line(tmp_path: Path) -> None:
    cases = {
        "a.launch.py": ("", "has no generate_launch_description()"),
        "f.launch.py": ("from launch import LaunchDescription\n",
                        "cannot import launch (rename launch, launch_ros and rclpy to"),
        "g.launch.py": (
            "from emailmw.launch import LaunchDescription\n"
            "from emailmw.launch.actions import EmitEvent\n"
            "class ChangeState:\n    pass\n"
            "def generate_launch_description():\n"
            "    return LaunchDescription([EmitEvent(event=ChangeState())])\n",
            "ChangeState is not supported by emailmw launch (Shutdown is)"),
        "h.launch.py": ("def generate_launch_description():\n    return 1 / 0\n",
                        "h.launch.py: line 2: ZeroDivisionError: division by zero"),
        "b.launch.yaml": ("launch:\n- set_remap: {from: a, to: b}\n",
                          "'set-remap' is not supported"),
        "c.launch.yaml": ("launch:\n- node: {pkg: p, exec: e, name: $(command ls)}\n",
                          "$(command ls) is not supported"),
        "d.launch.yaml": ("launch:\n- arg: {name: x}\n- node: {pkg: p, exec: e}\n",
                          "argument 'x' has no default: give x:=VALUE"),
        "e.launch.xml": ("<launch><node pkg='p' exec='e'><foo name='a'/></node>"
                         "</launch>", "<node> has <foo>, which is not supported"),
    }  # fmt: skip
    for name, (text, words) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(EmailMWError, match=None) as info:
            plan(path, {})
        assert words in str(info.value), name
        out = _cli("launch", str(path))
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1
        assert words in out.stderr


def test_ctrl_c_stops_every_process_of_a_launch(programs: Path, tmp_path: Path) -> None:
    """SIGINT to the launch goes to each process (as Ctrl-C in ros2 launch): it ends at
    once instead of after the nodes' minute."""
    path = tmp_path / "linger.launch.yaml"
    path.write_text(YAML.replace("PROGRAMS", str(programs)).replace(
        "    - {name: mode, value: fast}", "    - {name: linger, value: true}"))  # fmt: skip
    launch = subprocess.Popen([sys.executable, "-m", "emailmw", "launch", str(path)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert launch.stdout is not None
    seen = ""
    deadline = time.monotonic() + 30
    while "[left-1] /robot/left" not in seen and time.monotonic() < deadline:
        seen += launch.stdout.readline()
    assert "[left-1] /robot/left" in seen
    started = time.monotonic()
    launch.send_signal(signal.SIGINT)
    rest, _ = launch.communicate(timeout=30)
    assert time.monotonic() - started < 15
    assert "[ERROR] [left-1]: process has died" in rest


def test_the_daemon_s_directory_must_be_private(tmp_path: Path) -> None:
    """The command line hands verbs (and their arguments) only to a socket in a directory
    nobody else can write to: one others may write to (or own) is not used."""
    from emailmw._cli.quick import private_directory

    mine = tmp_path / "mine" / "emailmw"
    mine.mkdir(parents=True, mode=0o700)
    assert private_directory(mine)
    (tmp_path / "mine").chmod(0o777)
    assert not private_directory(mine)
    (tmp_path / "mine").chmod(0o700)
    mine.chmod(0o770)
    assert not private_directory(mine)
    assert not private_directory(tmp_path / "missing")


# ----------------------------------------------------------- Python launch files (#60)

#: ros2/demos' demo_nodes_cpp/launch/topics/talker_listener_launch.py, renamed (launch ->
#: emailmw.launch, launch_ros -> emailmw.launch_ros), its package the programs' directory
TALKER_LISTENER = """\
from emailmw.launch import LaunchDescription
import emailmw.launch_ros.actions


def generate_launch_description():
    return LaunchDescription([
        emailmw.launch_ros.actions.Node(
            package='PROGRAMS', executable='hello', output='screen'),
        emailmw.launch_ros.actions.Node(
            package='PROGRAMS', executable='hello', name='listener', output='screen'),
    ])
"""

#: what upstream launch files use together: arguments and configurations, a group with a
#: pushed namespace and a global parameter, conditions, parameters from a mapping with
#: substitutions and from a file, remappings, an include of an XML file with arguments, an
#: environment variable, a timer, a plain process
EVERYTHING = """\
import os

from emailmw.launch import LaunchDescription
from emailmw.launch.actions import (
    DeclareLaunchArgument, ExecuteProcess, GroupAction, IncludeLaunchDescription,
    SetEnvironmentVariable, TimerAction)
from emailmw.launch.conditions import IfCondition, UnlessCondition
from emailmw.launch.launch_description_sources import AnyLaunchDescriptionSource
from emailmw.launch.substitutions import (
    LaunchConfiguration, PathJoinSubstitution, PythonExpression, ThisLaunchFileDir)
from emailmw.launch_ros.actions import Node, PushRosNamespace, SetParameter


def generate_launch_description():
    speed = LaunchConfiguration('speed')
    return LaunchDescription([
        DeclareLaunchArgument('speed', default_value='2'),
        DeclareLaunchArgument('extra', default_value='false'),
        SetEnvironmentVariable('GREETING', 'hi'),
        GroupAction([
            PushRosNamespace('robot'),
            SetParameter(name='mode', value='fast'),
            Node(package='PROGRAMS', executable='hello', name='left', arguments=['alpha'],
                 parameters=[{'speed': speed, 'gains': [1, 2], 'pid': {'p': 0.5}},
                             PathJoinSubstitution([ThisLaunchFileDir(), 'params.yaml'])],
                 remappings=[('chatter', '/left/chatter')]),
        ]),
        Node(package='PROGRAMS', executable='hello', name='never',
             condition=IfCondition(LaunchConfiguration('extra'))),
        Node(package='PROGRAMS', executable='hello', name='twice',
             condition=UnlessCondition(PythonExpression([speed, ' < 3']))),
        IncludeLaunchDescription(
            AnyLaunchDescriptionSource(os.path.join(os.path.dirname(__file__),
                                                    'inner.launch.xml')),
            launch_arguments={'who': 'inner'}.items()),
        TimerAction(period=1.0, actions=[
            ExecuteProcess(cmd=['sh', '-c', 'echo "late $GREETING"'], name='late')]),
    ])
"""

INNER = """\
<launch>
  <arg name="who" default="nobody"/>
  <group>
    <push-ros-namespace namespace="$(var who)"/>
    <node pkg="PROGRAMS" exec="hello" name="$(var who)">
      <param name="tuning"><param name="gain" value="3"/></param>
      <env name="GREETING" value="hello"/>
    </node>
  </group>
</launch>
"""


def test_a_renamed_upstream_python_launch_file_runs(programs: Path, tmp_path: Path) -> None:
    path = tmp_path / "talker_listener_launch.py"
    path.write_text(TALKER_LISTENER.replace("PROGRAMS", str(programs)))
    out = _cli("launch", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "[hello-1] /hello {} /chatter ['--ros-args']" not in lines  # (no ros-args)
    assert "[hello-1] /hello {} /chatter []" in lines
    assert "[listener-2] /listener {} /chatter ['--ros-args']" in lines
    assert any(line.startswith("[INFO] [listener-2]: process has finished cleanly")
               for line in lines)  # fmt: skip


def test_a_python_launch_file_with_groups_conditions_includes_and_timers(
    programs: Path, tmp_path: Path
) -> None:
    (tmp_path / "everything.launch.py").write_text(EVERYTHING.replace("PROGRAMS", str(programs)))
    (tmp_path / "inner.launch.xml").write_text(INNER.replace("PROGRAMS", str(programs)))
    (tmp_path / "params.yaml").write_text("/**:\n  ros__parameters:\n    from_file: 7\n")
    out = _cli("launch", str(tmp_path / "everything.launch.py"), "speed:=5")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    left = next(line for line in lines if line.startswith("[left-1] "))
    assert left.startswith("[left-1] /robot/left {")
    assert "'speed': 5, 'gains': [1, 2], 'pid.p': 0.5" in left
    assert "'mode': 'fast'" in left  # (SetParameter, in the group)
    assert "'from_file': 7" in left
    assert left.endswith("/left/chatter ['alpha']")
    assert not any("never" in line for line in lines)  # IfCondition(false)
    assert any(line.startswith("[twice-2] /twice {}") for line in lines)  # 5 < 3 is False
    assert "[inner-3] /inner/inner {'tuning.gain': 3} /inner/chatter ['--ros-args']" in lines
    assert "[late-4] late hi" in lines
    started = [i for i, line in enumerate(lines) if "process started" in line]
    assert "[late-4]" in lines[started[-1]]  # (its timer: started last)


def test_launch_package_file_finds_it_in_the_share_directory_and_refuses_a_missing_program(
    programs: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "prefix"
    launch_dir = prefix / "share" / "demo_pkg" / "launch"
    launch_dir.mkdir(parents=True)
    (launch_dir / "talker_listener_launch.py").write_text(
        TALKER_LISTENER.replace("PROGRAMS", str(programs)))  # fmt: skip
    env = {**os.environ, "AMENT_PREFIX_PATH": str(prefix)}
    out = subprocess.run([sys.executable, "-m", "emailmw", "launch", "demo_pkg",
                          "talker_listener_launch.py"], capture_output=True, text=True,
                         timeout=60, check=False, env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[listener-2] /listener {} /chatter ['--ros-args']" in out.stdout.splitlines()
    (launch_dir / "broken.launch.xml").write_text(
        f'<launch><node pkg="{programs}" exec="hello"/>'
        f'<node pkg="{programs}" exec="nothere"/></launch>')  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "emailmw", "launch", "demo_pkg",
                          "broken.launch.xml"], capture_output=True, text=True,
                         timeout=60, check=False, env=env)  # fmt: skip
    assert out.returncode == 1
    assert out.stdout == ""  # (nothing started)
    assert out.stderr.count("\n") == 1
    assert "no nothere or nothere.py in the directory" in out.stderr


#: the shape of the ROS 2 documentation's "launch files in three formats" example (its
#: turtlesim nodes the programs' hello), renamed: `import launch` and dotted names, a
#: group with a pushed namespace from an argument, remappings, and a process started by a
#: timer when a Python expression over the arguments holds
THREE_FORMATS_PY = """\
import emailmw.launch as launch
import emailmw.launch.actions
import emailmw.launch.substitutions
import emailmw.launch_ros.actions


def generate_launch_description():
    background_r = launch.substitutions.LaunchConfiguration('new_background_r')
    return launch.LaunchDescription([
        launch.actions.DeclareLaunchArgument('chatter_ns', default_value='my/chatter/ns'),
        launch.actions.DeclareLaunchArgument('use_provided_red', default_value='False'),
        launch.actions.DeclareLaunchArgument('new_background_r', default_value='200'),
        launch.actions.GroupAction([
            emailmw.launch_ros.actions.PushRosNamespace(
                launch.substitutions.LaunchConfiguration('chatter_ns')),
            emailmw.launch_ros.actions.Node(package='PROGRAMS', executable='hello',
                                            name='talker'),
        ]),
        emailmw.launch_ros.actions.Node(package='PROGRAMS', executable='hello', name='sim',
                                        namespace='turtlesim1'),
        emailmw.launch_ros.actions.Node(
            package='PROGRAMS', executable='hello', name='mimic',
            remappings=[('chatter', '/turtlesim2/turtle1/cmd_vel')]),
        launch.actions.TimerAction(period=0.5, actions=[launch.actions.ExecuteProcess(
            cmd=[[launch.substitutions.FindExecutable(name='echo'), ' background ',
                  background_r]],
            shell=True, name='set_background',
            condition=launch.conditions.IfCondition(launch.substitutions.PythonExpression(
                [background_r, ' == 200', ' and ',
                 launch.substitutions.LaunchConfiguration('use_provided_red')])))]),
    ])
"""

THREE_FORMATS_XML = """\
<launch>
  <arg name="chatter_ns" default="my/chatter/ns"/>
  <arg name="use_provided_red" default="False"/>
  <arg name="new_background_r" default="200"/>
  <group>
    <push-ros-namespace namespace="$(var chatter_ns)"/>
    <node pkg="PROGRAMS" exec="hello" name="talker"/>
  </group>
  <node pkg="PROGRAMS" exec="hello" name="sim" namespace="turtlesim1"/>
  <node pkg="PROGRAMS" exec="hello" name="mimic">
    <remap from="chatter" to="/turtlesim2/turtle1/cmd_vel"/>
  </node>
  <timer period="0.5">
    <executable cmd="echo background $(var new_background_r)" name="set_background"
                if="$(eval '$(var new_background_r) == 200 and $(var use_provided_red)')"/>
  </timer>
</launch>
"""


THREE_FORMATS_YAML = """\
launch:
- arg: {name: "chatter_ns", default: "my/chatter/ns"}
- arg: {name: "use_provided_red", default: "False"}
- arg: {name: "new_background_r", default: "200"}
- group:
    - push-ros-namespace:
        namespace: "$(var chatter_ns)"
    - node: {pkg: "PROGRAMS", exec: "hello", name: "talker"}
- node:
    pkg: "PROGRAMS"
    exec: "hello"
    name: "sim"
    namespace: "turtlesim1"
- node:
    pkg: "PROGRAMS"
    exec: "hello"
    name: "mimic"
    remap:
    -
        from: "chatter"
        to: "/turtlesim2/turtle1/cmd_vel"
- timer:
    period: 0.5
    children:
    - executable:
        cmd: "echo background $(var new_background_r)"
        name: "set_background"
        if: "$(eval '$(var new_background_r) == 200 and $(var use_provided_red)')"
"""


@pytest.mark.parametrize("form", ["py", "xml", "yaml"])
def test_the_ros_2_docs_three_formats_example_runs(
    programs: Path, tmp_path: Path, form: str
) -> None:
    text = {"py": THREE_FORMATS_PY, "xml": THREE_FORMATS_XML, "yaml": THREE_FORMATS_YAML}[form]
    path = tmp_path / f"three.launch.{form}"
    path.write_text(text.replace("PROGRAMS", str(programs)))
    out = _cli("launch", str(path), "use_provided_red:=True")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "[talker-1] /my/chatter/ns/talker {} /my/chatter/ns/chatter ['--ros-args']" in lines
    assert "[sim-2] /turtlesim1/sim {} /turtlesim1/chatter ['--ros-args']" in lines
    assert "[mimic-3] /mimic {} /turtlesim2/turtle1/cmd_vel ['--ros-args']" in lines
    assert "[set_background-4] background 200" in lines
    out = _cli("launch", str(path), "new_background_r:=100", "use_provided_red:=True")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not any("set_background" in line for line in out.stdout.splitlines())


def test_a_program_ending_on_a_setup_mistake_says_it_in_one_line(tmp_path: Path) -> None:
    """(#60: a plain install's listener_serialized ended in a traceback: CDR needs the
    bag extra) A program that called init() and ends on an uncaught ConfigError: one line
    and status 1; any other exception keeps its traceback."""
    program = tmp_path / "needs.py"
    program.write_text(
        "import sys\nimport emailmw\nfrom emailmw import ConfigError\n"
        "emailmw.init({'intraprocess': True}, args=sys.argv)\n"
        "if sys.argv[1] == 'setup':\n"
        '    raise ConfigError("CDR serialization needs the bag extra (rosbags): pip install '
        "'emailmw[bag]'\", source='emailmw.serialization')\n"
        "raise RuntimeError('a bug of its own')\n"
    )
    out = subprocess.run([sys.executable, str(program), "setup"], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        "emailmw: error: emailmw.serialization: CDR serialization needs the bag extra "
        "(rosbags): pip install 'emailmw[bag]'"
    )
    assert "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, str(program), "bug"], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 1
    assert "Traceback" in out.stderr
    assert out.stderr.splitlines()[-1] == "RuntimeError: a bug of its own"
    # a mistake in the account init() reads: one line too (was: a traceback out of init)
    program.write_text("import emailmw\nemailmw.init({'polling-period': 'often'})\n")
    out = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert out.returncode == 1
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("emailmw: error: ")
    assert "polling-period" in out.stderr


#: event handlers as upstream files use them (the ROS 2 docs' "using event handlers"
#: tutorial's shape, its turtlesim nodes the programs' hello): a second node started when
#: the first starts, a line the first prints handed to a callable, a shutdown when the
#: second ends, OnShutdown with the event's reason, a process started again twice
EVENTS = """\
from emailmw.launch import LaunchDescription
from emailmw.launch.actions import (
    EmitEvent, ExecuteProcess, LogInfo, RegisterEventHandler, TimerAction)
from emailmw.launch.event_handlers import (
    OnExecutionComplete, OnProcessExit, OnProcessIO, OnProcessStart, OnShutdown)
from emailmw.launch.events import Shutdown
from emailmw.launch.substitutions import LocalSubstitution
from emailmw.launch_ros.actions import Node


def generate_launch_description():
    first = Node(package='PROGRAMS', executable='hello', name='first')
    second = Node(package='PROGRAMS', executable='hello', name='second')
    stays = Node(package='PROGRAMS', executable='hello', name='stays',
                 parameters=[{'linger': True}])
    again = ExecuteProcess(cmd=['echo', 'once more'], name='again', respawn=True,
                           respawn_max_retries=2)
    ended = []

    def end_once_all_ended(event, context):
        # (first and second race each other, and again's respawns race both: the launch
        # ends once all of them ended, whatever the order, so a busy machine cannot cut one)
        ended.append(event.action)
        if first in ended and second in ended and ended.count(again) == 3:
            return [EmitEvent(event=Shutdown(reason='first, second and again ended'))]
        return []

    return LaunchDescription([
        stays,
        first,
        again,
        RegisterEventHandler(OnProcessStart(target_action=first, on_start=[
            LogInfo(msg='first started, starting second'),
            TimerAction(period=0.5, actions=[second])])),
        RegisterEventHandler(OnProcessIO(target_action=first, on_stdout=lambda event: LogInfo(
            msg='first says ' + event.text.decode().split()[0]))),
        RegisterEventHandler(OnExecutionComplete(target_action=first, on_completion=[
            LogInfo(msg='first complete')])),
        RegisterEventHandler(OnProcessExit(target_action=second, on_exit=[
            LogInfo(msg=['second ended with ', LocalSubstitution('event.returncode')])])),
        RegisterEventHandler(OnProcessExit(on_exit=end_once_all_ended)),
        RegisterEventHandler(OnShutdown(on_shutdown=[LogInfo(
            msg=['Launch was asked to shutdown: ', LocalSubstitution('event.reason')])])),
    ])
"""


def test_event_handlers_start_processes_and_end_the_launch(programs: Path, tmp_path: Path) -> None:
    """#60: RegisterEventHandler with OnProcessStart, OnProcessIO, OnExecutionComplete,
    OnProcessExit, OnShutdown; EmitEvent(Shutdown) stops what still runs (the node that
    would stay a minute) at once; respawn; LocalSubstitution of the event (were: refused)."""
    path = tmp_path / "events.launch.py"
    path.write_text(EVENTS.replace("PROGRAMS", str(programs)))
    started = time.monotonic()
    out = _cli("launch", str(path))
    took = time.monotonic() - started
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()

    def at(text: str) -> int:
        found = [i for i, line in enumerate(lines) if text in line]
        assert found, f"{text!r} not in:\n{out.stdout}"
        return found[0]

    assert at("[INFO] [first-2]: process started") < at("first started, starting second")
    assert at("first started, starting second") < at("[INFO] [second-4]: process started")
    assert "[INFO] [launch.user]: first says /first" in lines
    assert at("[INFO] [first-2]: process has finished cleanly") < at("first complete")
    assert at("[INFO] [second-4]: process has finished cleanly") < at("second ended with 0")
    assert at("second ended with 0") < at("Launch was asked to shutdown: first, second and")
    assert at("first complete") < at("Launch was asked to shutdown")
    assert lines.count("[again-3] once more") == 3  # (started, then twice again)
    assert at("Launch was asked to shutdown") < at("[stays-1]: process has died")
    assert took < 45  # (stays would have run a minute: it was stopped at the shutdown)


def test_a_node_s_on_exit_shutdown_in_xml_ends_the_launch(programs: Path, tmp_path: Path) -> None:
    """ROS 2's XML ``on_exit="shutdown"`` (and the Python ``on_exit=Shutdown()``): when
    that process ends, the rest is stopped; one that ignores SIGINT gets SIGTERM after its
    ``sigterm_timeout``, as ros2 launch escalates."""
    (tmp_path / "stubborn.sh").write_text("trap '' INT\nexec sleep 60\n")
    path = tmp_path / "exit.launch.xml"
    path.write_text(
        f'<launch><node pkg="{programs}" exec="hello" name="stays">'
        '<param name="linger" value="true"/></node>'
        f'<executable cmd="sh {tmp_path}/stubborn.sh" name="stubborn" sigterm_timeout="1"/>'
        f'<timer period="1"><node pkg="{programs}" exec="hello" name="done" on_exit="shutdown"/>'
        "</timer></launch>"
    )
    started = time.monotonic()
    out = _cli("launch", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - started < 45
    lines = out.stdout.splitlines()
    assert any(line.startswith("[INFO] [done-3]: process has finished cleanly") for line in lines)
    assert any(line.startswith("[ERROR] [stays-1]: process has died") for line in lines)
    assert ("[ERROR] [stubborn-2]: process[stubborn-2] failed to terminate '1' seconds after "
            "receiving 'SIGINT', escalating to 'SIGTERM'") in lines  # fmt: skip
