"""The message types of ``geometry_msgs``, loaded from the interface files of
``emailmw/share/geometry_msgs/msg`` when this module is imported."""

from typing import Any

from .._core.interfaces import package

_types: Any = package("geometry_msgs").msg
Accel = _types.Accel
AccelStamped = _types.AccelStamped
AccelWithCovariance = _types.AccelWithCovariance
AccelWithCovarianceStamped = _types.AccelWithCovarianceStamped
Inertia = _types.Inertia
InertiaStamped = _types.InertiaStamped
Point = _types.Point
Point32 = _types.Point32
PointStamped = _types.PointStamped
Polygon = _types.Polygon
PolygonStamped = _types.PolygonStamped
Pose = _types.Pose
Pose2D = _types.Pose2D
PoseArray = _types.PoseArray
PoseStamped = _types.PoseStamped
PoseWithCovariance = _types.PoseWithCovariance
PoseWithCovarianceStamped = _types.PoseWithCovarianceStamped
Quaternion = _types.Quaternion
QuaternionStamped = _types.QuaternionStamped
Transform = _types.Transform
TransformStamped = _types.TransformStamped
Twist = _types.Twist
TwistStamped = _types.TwistStamped
TwistWithCovariance = _types.TwistWithCovariance
TwistWithCovarianceStamped = _types.TwistWithCovarianceStamped
Vector3 = _types.Vector3
Vector3Stamped = _types.Vector3Stamped
Wrench = _types.Wrench
WrenchStamped = _types.WrenchStamped

__all__ = [
    "Accel",
    "AccelStamped",
    "AccelWithCovariance",
    "AccelWithCovarianceStamped",
    "Inertia",
    "InertiaStamped",
    "Point",
    "Point32",
    "PointStamped",
    "Polygon",
    "PolygonStamped",
    "Pose",
    "Pose2D",
    "PoseArray",
    "PoseStamped",
    "PoseWithCovariance",
    "PoseWithCovarianceStamped",
    "Quaternion",
    "QuaternionStamped",
    "Transform",
    "TransformStamped",
    "Twist",
    "TwistStamped",
    "TwistWithCovariance",
    "TwistWithCovarianceStamped",
    "Vector3",
    "Vector3Stamped",
    "Wrench",
    "WrenchStamped",
]
