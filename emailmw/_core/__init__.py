"""The core: bytes in, objects out, and the decisions on them, without I/O."""
