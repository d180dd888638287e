"""Layers 1-2: mail transports (executors, senders and receivers). Private; see ``emailmw.abc``."""
