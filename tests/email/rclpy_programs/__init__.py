"""ROS 2 tutorial programs as rclpy users write them. They import rclpy: the tests port
them by the rule of docs/ros-users.md (``rclpy`` -> ``emailmw``, message packages
prefixed) and run the result over the local mail server. Not importable as they are."""
