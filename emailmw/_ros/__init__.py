"""The ROS layer: nodes, executors, actions, parameters, time."""
