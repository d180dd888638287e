"""ROS interface files: the parser against ROS's grammar (constants, defaults, arrays,
bounded strings, comments, nested types), the loader of a user's package, the checks a
message's values pass, and ``interface show``."""

from __future__ import annotations

from pathlib import Path

import pytest

import emailmw
from emailmw import TypeMismatchError
from emailmw._core.idl import TypeSpec, parse_action, parse_message, parse_service
from emailmw._core.interfaces import deserialize, serialize, show
from emailmw.exceptions import ParameterException
from emailmw.interfaces import load

GRAMMAR = """\
# A message that uses the whole grammar.
int32 X=123            # a constant
string NAME="a # not a comment"
uint8 SMALL = 7
int8 plain
float64 ratio 0.5
bool flag true
string greeting "hello # still the string"
string<=5 short
string<=3[<=2] names ["ab", "c"]
int32[] numbers [1, 2, 3]
float32[3] vector
uint16[<=4] few
geometry_msgs/Point where
Inner local
"""


def test_the_grammar_parses_into_fields_and_constants() -> None:
    spec = parse_message(GRAMMAR, "pkg/msg/Everything")
    constants = {c.name: c.value for c in spec.constants}
    assert constants == {"X": 123, "NAME": "a # not a comment", "SMALL": 7}
    fields = {f.name: f for f in spec.fields}
    assert list(fields) == ["plain", "ratio", "flag", "greeting", "short", "names", "numbers",
                            "vector", "few", "where", "local"]  # fmt: skip
    assert fields["ratio"].default == 0.5
    assert fields["flag"].default is True
    assert fields["greeting"].default == "hello # still the string"
    assert fields["short"].type == TypeSpec("string", string_bound=5)
    assert fields["names"].type == TypeSpec("string", array=True, bound=2, string_bound=3)
    assert fields["names"].default == ["ab", "c"]
    assert fields["numbers"].type == TypeSpec("int32", array=True)
    assert fields["vector"].type == TypeSpec("float32", array=True, size=3)
    assert fields["few"].type == TypeSpec("uint16", array=True, bound=4)
    assert fields["where"].type.base == "geometry_msgs/msg/Point"
    assert fields["local"].type.base == "pkg/msg/Inner"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("int8 x 300", "not a int8"),
        ("uint8 x -1", "not a uint8"),
        ('string<=2 s "abc"', "longer than 2"),
        ("int32[2] xs [1, 2, 3]", "3 values for an array of 2"),
        ("int32 Bad", "a field's name"),
        ("int32 x\nint32 x", "defined twice"),
        ("int32[] X=1", "primitive type"),
        ("geometry_msgs/Point p 1", "only primitive fields"),
        ("int32", "TYPE NAME"),
        ("bool b maybe", "not a bool"),
        ("float64 x abc", "not a float64"),
        ("int32 lower=1", "upper case"),
    ],
)
def test_a_wrong_definition_names_the_file_and_line(text: str, says: str) -> None:
    with pytest.raises(emailmw.InterfaceError, match=rf"^f\.msg:\d+: .*{says}"):
        parse_message("# first line is a comment\n" + text, "pkg/msg/Bad", "f.msg")


def test_services_and_actions_are_parts_separated_by_dashes() -> None:
    service = parse_service("int64 a\nint64 b\n---\nint64 sum", "pkg/srv/Add")
    assert [f.name for f in service.request.fields] == ["a", "b"]
    assert [f.name for f in service.response.fields] == ["sum"]
    action = parse_action("int32 order\n---\nint32[] seq\n---\nint32[] part", "pkg/action/F")
    assert action.goal.name == "pkg/action/F_Goal"
    assert [f.name for f in action.feedback.fields] == ["part"]
    with pytest.raises(emailmw.InterfaceError, match="2 parts"):
        parse_service("int64 a", "pkg/srv/Broken", "x.srv")


def _package(root: Path) -> Path:
    package = root / "my_robot_interfaces"
    (package / "msg").mkdir(parents=True)
    (package / "srv").mkdir()
    (package / "action").mkdir()
    (package / "package.xml").write_text("<package><name>my_robot_interfaces</name></package>")
    (package / "msg" / "Status.msg").write_text(
        'uint8 OK=0\nuint8 FAULT=1\n\nuint8 level\nstring message "fine"\n'
        "geometry_msgs/Pose pose   # from a package emailmw ships\nJoint[2] joints\n"
    )
    (package / "msg" / "Joint.msg").write_text("string name\nfloat64 position\n")
    (package / "srv" / "Move.srv").write_text("Joint target\n---\nbool done\n")
    (package / "action" / "Dance.action").write_text(
        "uint32 moves\n---\nbool ok\n---\nuint32 done\n"
    )
    return package


def test_a_users_package_loads_into_types_that_travel(tmp_path: Path) -> None:
    types = load(_package(tmp_path))
    status = types.msg.Status()
    assert (status.level, status.message, types.msg.Status.FAULT) == (0, "fine", 1)
    assert status.pose.orientation.w == 1.0  # a nested default from geometry_msgs
    assert [j.name for j in status.joints] == ["", ""]  # a fixed array of defaults
    status.joints[0].position = 1.5
    assert deserialize(types.msg.Status, serialize(status)) == status
    assert types.srv.Move.Request().target == types.msg.Joint()
    assert types.action.Dance.Goal(moves=3).moves == 3
    assert emailmw.get_interface("my_robot_interfaces/msg/Status") is types.msg.Status
    assert "my_robot_interfaces/action/Dance" in emailmw.interface_names()


def test_values_are_checked_against_their_types_when_sent_and_received() -> None:
    from emailmw.std_msgs.msg import Int8, UInt8MultiArray
    from emailmw.unique_identifier_msgs.msg import UUID

    with pytest.raises(TypeMismatchError, match=r"std_msgs/msg/Int8\.data: 128 is not a int8"):
        serialize(Int8(data=128))
    with pytest.raises(TypeMismatchError, match="17 items where 16 go"):
        serialize(UUID(uuid=[0] * 17))
    with pytest.raises(TypeMismatchError, match=r"data\[1\]: 256"):
        deserialize(UInt8MultiArray, "data: [1, 256]")


def test_enum_members_travel_as_the_values_they_are() -> None:
    """A field set to an ``IntEnum`` or ``StrEnum`` member (ros2/demos' logger service sets
    ``LoggerLevel.level = LoggingSeverity.DEBUG``) is sent as its int or text, as rclpy
    sends it: was a traceback from YAML ("cannot represent an object")."""
    import enum

    from emailmw.impl.logging_severity import LoggingSeverity
    from emailmw.rcl_interfaces.msg import LoggerLevel
    from emailmw.std_msgs.msg import String

    class Word(enum.StrEnum):
        HELLO = "hello"

    text = serialize(LoggerLevel(name="node", level=LoggingSeverity.DEBUG))
    assert deserialize(LoggerLevel, text).level == 10
    assert type(deserialize(LoggerLevel, text).level) is int
    assert deserialize(String, serialize(String(data=Word.HELLO))).data == "hello"


def test_interface_show_prints_ros_definitions_with_nested_types_expanded() -> None:
    assert show("example_interfaces/srv/AddTwoInts") == "int64 a\nint64 b\n---\nint64 sum"
    pose = show("geometry_msgs/msg/Pose").splitlines()
    assert pose[-5:] == ["Quaternion orientation", "\tfloat64 x 0", "\tfloat64 y 0",
                         "\tfloat64 z 0", "\tfloat64 w 1"]  # fmt: skip


def test_a_broken_package_is_one_error_naming_the_file(tmp_path: Path) -> None:
    package = tmp_path / "broken_pkg"
    (package / "msg").mkdir(parents=True)
    (package / "msg" / "Bad.msg").write_text("int32 x\nstrin y\n")
    with pytest.raises(emailmw.InterfaceError, match=r"Bad\.msg: .*unknown type"):
        load(package)
    assert not issubclass(emailmw.InterfaceError, ParameterException)
