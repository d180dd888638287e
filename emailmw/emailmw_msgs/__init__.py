"""emailmw's own interfaces as it ships them (``emailmw/share/emailmw_msgs``): what a bag
keeps of each message (``MessageInfo``)."""

from . import msg

__all__ = ["msg"]
