"""rclpy's ``rclpy.qos``: QoS profiles, their policies and presets (``docs/qos.md``:
what each means over email)."""

from ._core.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    LivelinessPolicy,
    QoSCompatibility,
    QoSPresetProfiles,
    QoSProfile,
    ReliabilityPolicy,
    qos_check_compatible,
    qos_profile_action_status_default,
    qos_profile_parameter_events,
    qos_profile_parameters,
    qos_profile_sensor_data,
    qos_profile_services_default,
    qos_profile_system_default,
)

# rclpy's older names of the policies
QoSHistoryPolicy = HistoryPolicy
QoSReliabilityPolicy = ReliabilityPolicy
QoSDurabilityPolicy = DurabilityPolicy
QoSLivelinessPolicy = LivelinessPolicy

__all__ = [
    "DurabilityPolicy",
    "HistoryPolicy",
    "LivelinessPolicy",
    "QoSDurabilityPolicy",
    "QoSHistoryPolicy",
    "QoSLivelinessPolicy",
    "QoSCompatibility",
    "QoSPresetProfiles",
    "QoSProfile",
    "QoSReliabilityPolicy",
    "ReliabilityPolicy",
    "qos_check_compatible",
    "qos_profile_action_status_default",
    "qos_profile_parameter_events",
    "qos_profile_parameters",
    "qos_profile_sensor_data",
    "qos_profile_services_default",
    "qos_profile_system_default",
]
