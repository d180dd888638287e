"""rclpy's ``rclpy.impl``: what ROS programs import from it (``logging_severity``)."""
