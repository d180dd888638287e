"""Logging through the standard library, configured from the environment, with secret redaction.

* ``EMAILMW_LOG_LEVEL``: ``debug``, ``info``, ``warning``, ``error`` or ``off``. Unset, emailmw
  adds no handler of its own (library etiquette: the application decides).
* ``EMAILMW_LOG_FILE``: log to this file instead of standard error.

Passwords never reach a log line: code never formats them, and as a second line of defence
every emailmw logger carries a filter that replaces registered secrets with ``***``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Final

__all__ = ["configure_from_env", "get_logger", "redact", "register_secret"]

ROOT_NAME: Final = "emailmw"
_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL + 10,
}

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first: a secret containing another is masked whole
_configured_handler: logging.Handler | None = None


def register_secret(secret: str) -> None:
    """Make every emailmw log line replace ``secret`` with ``***`` (thread-safe)."""
    global _secrets
    if secret:
        with _lock:
            _secrets = tuple(sorted({*_secrets, secret}, key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


class _RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _secrets:
            message = record.getMessage()
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


_FILTER: Final = _RedactingFilter()
logging.getLogger(ROOT_NAME).addHandler(logging.NullHandler())
logging.getLogger(ROOT_NAME).addFilter(_FILTER)


def get_logger(name: str) -> logging.Logger:
    """The logger ``emailmw.<name>``, with the redaction filter attached."""
    logger = logging.getLogger(f"{ROOT_NAME}.{name}")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def configure_from_env() -> None:
    """Apply ``EMAILMW_LOG_LEVEL``/``EMAILMW_LOG_FILE``; idempotent, a no-op when unset."""
    global _configured_handler
    level_name = os.environ.get("EMAILMW_LOG_LEVEL", "").strip().lower()
    log_file = os.environ.get("EMAILMW_LOG_FILE", "").strip()
    if not level_name and not log_file:
        return
    level = _LEVELS.get(level_name or "info")
    if level is None:
        raise ValueError(
            f"EMAILMW_LOG_LEVEL={level_name!r}: expected one of {', '.join(sorted(_LEVELS))}"
        )
    root = logging.getLogger(ROOT_NAME)
    with _lock:
        if _configured_handler is not None:
            root.removeHandler(_configured_handler)
            _configured_handler.close()
        handler: logging.Handler = (
            logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler()
        )
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s [%(name)s:%(threadName)s] %(message)s")
        )
        handler.addFilter(_FILTER)
        root.addHandler(handler)
        root.setLevel(level)
        _configured_handler = handler
