import sys

import rclpy
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter


def main():
    rclpy.init()
    node = Node("parameter_setter")
    client = node.create_client(SetParameters, sys.argv[1] + "/set_parameters")
    if not client.wait_for_service(timeout_sec=30.0):
        node.get_logger().error("no parameter service")
        return
    request = SetParameters.Request()
    request.parameters = [Parameter(sys.argv[2], value=sys.argv[3]).to_parameter_msg()]
    future = client.call_async(request)
    rclpy.spin_until_future_complete(node, future, timeout_sec=30.0)
    result = future.result().results[0]
    node.get_logger().info("Set parameter successful: %s" % str(result.successful).lower())
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
