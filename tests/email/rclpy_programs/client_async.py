# ros2/examples, rclpy/services/minimal_client/examples_rclpy_minimal_client/client_async.py
# (Apache-2.0): spin_once(node) without a timeout, until the call's future is done.
import rclpy
from example_interfaces.srv import AddTwoInts


def main(args=None):
    rclpy.init(args=args)
    node = rclpy.create_node("minimal_client_async")
    cli = node.create_client(AddTwoInts, "add_two_ints")
    req = AddTwoInts.Request()
    req.a = 41
    req.b = 1
    while not cli.wait_for_service(timeout_sec=1.0):
        node.get_logger().info("service not available, waiting again...")
    future = cli.call_async(req)
    while rclpy.ok():
        rclpy.spin_once(node)
        if future.done():
            try:
                result = future.result()
            except Exception as e:
                node.get_logger().info("Service call failed %r" % (e,))
            else:
                node.get_logger().info(
                    "Result of add_two_ints: for %d + %d = %d" % (req.a, req.b, result.sum)
                )
            break
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
