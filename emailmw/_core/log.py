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
import re
import threading
from collections import Counter
from typing import Final

from .errors import InvalidArgumentError

__all__ = ["RefusalLog", "configure_from_env", "get_logger", "redact", "register_secret"]

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
        raise InvalidArgumentError(
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


class RefusalLog:
    """The log of refused or unusable mail, bounded: the first of each kind (its status and
    its reason but for Message-IDs and numbers) in an interval is logged whole (WARNING, on
    ``logger``); the rest of that interval are counted and said in one line when it ends
    (at the next call, or :meth:`flush`), so a flood of bad mail cannot drown the log. At
    most :data:`_KINDS` kinds are told apart; the rest count as one. Thread-safe."""

    _KINDS: Final = 100
    _VARIES: Final = re.compile(r"<[^<>]*>|\d+")

    def __init__(self, interval: float = 10.0, logger: logging.Logger | None = None) -> None:
        self.interval = interval
        self._logger = logger or get_logger("polling")
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}  # kind -> when its interval began
        self._more: Counter[str] = Counter()  # kind -> refusals not logged in it
        self._last: dict[str, str] = {}  # kind -> the last reason not logged

    def refused(self, status: str, line: str, reason: str, now: float) -> None:
        """One more refused email of ``status`` for ``reason``; ``line`` is what is logged
        when it is the first of its kind in the interval."""
        self.flush(now)
        kind = f"{status}: {self._VARIES.sub('#', reason)[:200]}"
        with self._lock:
            if kind not in self._since and len(self._since) >= self._KINDS:
                kind = f"{status}: other reasons"
            if kind in self._since:
                self._more[kind] += 1
                self._last[kind] = reason
                return
            self._since[kind] = now
        self._logger.warning("%s", line)

    def flush(self, now: float, *, all_: bool = False) -> None:
        """Say what was counted in each interval that ended (every one with ``all_``)."""
        said = []
        with self._lock:
            for kind, since in list(self._since.items()):
                if not all_ and now - since < self.interval:
                    continue
                del self._since[kind]
                more = self._more.pop(kind, 0)
                if more:
                    said.append(
                        (more, now - since, kind.partition(":")[0], self._last.pop(kind, ""))
                    )
        for more, seconds, status, last in said:
            self._logger.warning(
                "quarantined %d more emails in the last %.0f s as %s (the last: %s)",
                more, seconds, status, last,
            )  # fmt: skip
