"""Bags that ROS tools open (``emailmw bag``): recorded live from topics, played back with
their timing, or exported after the fact from a mail archive. rosbag2's MCAP storage,
written and read with the ``rosbags`` package (its typestore holds emailmw's types by their
ROS definitions: ``convert``). Needs the ``bag`` extra."""
