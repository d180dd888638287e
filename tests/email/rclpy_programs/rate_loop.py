import threading

import rclpy


def main():
    rclpy.init()
    node = rclpy.create_node("simple_node")

    # Spin in a separate thread
    thread = threading.Thread(target=rclpy.spin, args=(node,), daemon=True)
    thread.start()

    rate = node.create_rate(20)

    try:
        for i in range(10):
            print("Help me body, you are my only hope %d" % i, flush=True)
            rate.sleep()
    except KeyboardInterrupt:
        pass

    rclpy.shutdown()
    thread.join()
    print("joined", flush=True)


if __name__ == "__main__":
    main()
