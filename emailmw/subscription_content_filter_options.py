"""rclpy's ``rclpy.subscription_content_filter_options``: :class:`ContentFilterOptions`,
a subscription's content filter (``create_subscription(..., content_filter_options=)``)."""

from ._ros.entities import ContentFilterOptions

__all__ = ["ContentFilterOptions"]
