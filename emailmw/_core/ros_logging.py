"""rclpy's node logging (``emailmw.logging``, ``Node.get_logger()``): named loggers with
``debug``/``info``/``warn``/``error``/``fatal``, their ``once``, ``skip_first`` and
``throttle_duration_sec`` options, and levels per logger name.

Lines go to standard error in rcutils' default format::

    [INFO] [1700000000.123456789] [talker]: Publishing: "Hello World: 1"

(``RCUTILS_CONSOLE_OUTPUT_FORMAT`` changes it: ``{severity}``, ``{time}``, ``{name}``,
``{message}``, ``{function_name}``, ``{file_name}``, ``{line_number}``;
``RCUTILS_LOGGING_USE_STDOUT=1`` writes to standard output). A logger's level is its
own, else its nearest parent's (``a.b`` is a child of ``a``), else the default: INFO, or
what ``--ros-args --log-level`` (:func:`set_levels_from_args`) or
``RCUTILS_LOGGING_SEVERITY`` says. Thread-safe.
"""

from __future__ import annotations

import enum
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TextIO

from .errors import InvalidArgumentError

__all__ = [
    "LogRecord",
    "add_sink",
    "remove_sink",
    "LoggingSeverity",
    "RcutilsLogger",
    "get_logger",
    "get_logger_level",
    "set_logger_level",
    "severity_of",
]

_FORMAT: Final = "[{severity}] [{time}] [{name}]: {message}"


class LoggingSeverity(enum.IntEnum):
    """rclpy's logging severities."""

    UNSET = 0
    DEBUG = 10
    INFO = 20
    WARN = 30
    ERROR = 40
    FATAL = 50


_lock = threading.Lock()
_levels: dict[str, LoggingSeverity] = {}
_default = LoggingSeverity.INFO
_write_lock = threading.Lock()


def severity_of(text: str | int | LoggingSeverity) -> LoggingSeverity:
    """A severity from its name (``info``, ``WARN``, ``warning``) or number; ``ValueError``
    names the choices."""
    if isinstance(text, int):
        return LoggingSeverity(text)
    name = text.strip().upper()
    name = {"WARNING": "WARN", "CRITICAL": "FATAL"}.get(name, name)
    try:
        return LoggingSeverity[name]
    except KeyError:
        raise InvalidArgumentError(
            f"{text!r} is not a log level: one of debug, info, warn, error, fatal"
        ) from None


def _env_default() -> LoggingSeverity:
    value = os.environ.get("RCUTILS_LOGGING_SEVERITY", "").strip()
    return severity_of(value) if value else LoggingSeverity.INFO


def set_logger_level(name: str, level: LoggingSeverity | int | str) -> None:
    """Set logger ``name``'s level (``""``: the default for every logger)."""
    global _default
    severity = severity_of(level)
    with _lock:
        if not name:
            _default = severity
        else:
            _levels[name] = severity


def get_logger_level(name: str) -> LoggingSeverity:
    """Logger ``name``'s own level (UNSET when it has none)."""
    with _lock:
        return _levels.get(name, LoggingSeverity.UNSET)


def _effective(name: str) -> LoggingSeverity:
    with _lock:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            found = _levels.get(".".join(parts[:end]))
            if found is not None and found != LoggingSeverity.UNSET:
                return found
        return _default


def set_levels_from_args(levels: dict[str, str]) -> None:
    """Apply ``--log-level`` arguments: ``{"": "debug"}`` for the default,
    ``{"talker": "warn"}`` for one logger."""
    for name, level in levels.items():
        set_logger_level(name, level)


def _stream() -> TextIO:
    return sys.stdout if os.environ.get("RCUTILS_LOGGING_USE_STDOUT") == "1" else sys.stderr


class RcutilsLogger:
    """A named logger, rclpy's ``RcutilsLogger``. Each method returns whether it logged."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._seen: set[tuple[str, int, str]] = set()  # (file, line, option) first calls
        self._last: dict[tuple[str, int], float] = {}  # throttled call site -> last logged
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<RcutilsLogger {self.name!r}>"

    def get_child(self, name: str) -> RcutilsLogger:
        if not name:
            raise InvalidArgumentError("a child logger needs a name")
        return get_logger(f"{self.name}.{name}" if self.name else name)

    def set_level(self, level: LoggingSeverity | int | str) -> None:
        set_logger_level(self.name, level)

    def get_effective_level(self) -> LoggingSeverity:
        return _effective(self.name)

    def is_enabled_for(self, severity: LoggingSeverity | int) -> bool:
        return LoggingSeverity(severity) >= self.get_effective_level()

    def _pass(self, site: tuple[str, int], once: bool, skip_first: bool, every: float) -> bool:
        with self._lock:
            if once:
                if (*site, "once") in self._seen:
                    return False
                self._seen.add((*site, "once"))
            if skip_first and (*site, "skip") not in self._seen:
                self._seen.add((*site, "skip"))
                return False
            if every:
                now = time.monotonic()
                last = self._last.get(site)
                if last is not None and now - last < every:
                    return False
                self._last[site] = now
        return True

    def log(
        self,
        message: Any,
        severity: LoggingSeverity | int,
        *,
        name: str | None = None,
        once: bool = False,
        skip_first: bool = False,
        throttle_duration_sec: float | None = None,
        throttle_time_source_type: Any = None,
        _depth: int = 1,
    ) -> bool:
        """Log ``message`` at ``severity`` (see the module); ``once``: only the first
        call from this place; ``skip_first``: all but the first; ``throttle_duration_sec``:
        at most once per that many seconds from this place."""
        del throttle_time_source_type  # the system clock: emailmw has no simulated time
        severity = LoggingSeverity(severity)
        if not self.is_enabled_for(severity):
            return False
        frame = inspect.currentframe()
        for _ in range(_depth):
            frame = frame.f_back if frame is not None else None
        file_name = frame.f_code.co_filename if frame is not None else ""
        line = frame.f_lineno if frame is not None else 0
        function = frame.f_code.co_name if frame is not None else ""
        if not self._pass((file_name, line), once, skip_first, throttle_duration_sec or 0.0):
            return False
        stamp = time.time_ns()
        text = os.environ.get("RCUTILS_CONSOLE_OUTPUT_FORMAT") or _FORMAT
        try:
            out = text.format(
                severity=severity.name,
                time=f"{stamp // 1_000_000_000}.{stamp % 1_000_000_000:09d}",
                name=name or self.name,
                message=message,
                function_name=function,
                file_name=file_name,
                line_number=line,
            )
        except (KeyError, IndexError, ValueError):  # a format with unknown fields
            out = _FORMAT.format(
                severity=severity.name, time=stamp / 1e9, name=name or self.name, message=message
            )
        stream = _stream()
        with _write_lock:
            try:
                stream.write(out + "\n")
                stream.flush()
            except (OSError, ValueError):  # a closed stream at exit
                return False
        for sink in _SINKS:
            sink(LogRecord(stamp, severity, name or self.name, str(message), file_name,
                           function, line))  # fmt: skip
        return True

    def debug(self, message: Any, **kwargs: Any) -> bool:
        return self.log(message, LoggingSeverity.DEBUG, _depth=2, **kwargs)

    def info(self, message: Any, **kwargs: Any) -> bool:
        return self.log(message, LoggingSeverity.INFO, _depth=2, **kwargs)

    def warn(self, message: Any, **kwargs: Any) -> bool:
        return self.log(message, LoggingSeverity.WARN, _depth=2, **kwargs)

    warning = warn

    def error(self, message: Any, **kwargs: Any) -> bool:
        return self.log(message, LoggingSeverity.ERROR, _depth=2, **kwargs)

    def fatal(self, message: Any, **kwargs: Any) -> bool:
        return self.log(message, LoggingSeverity.FATAL, _depth=2, **kwargs)


_loggers: dict[str, RcutilsLogger] = {}


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One line logged, for the sinks (a node's ``/rosout``)."""

    stamp_ns: int
    severity: LoggingSeverity
    name: str
    message: str
    file: str
    function: str
    line: int


#: called with every line logged (after it is written); quick, never raising
_SINKS: list[Callable[[LogRecord], None]] = []


def add_sink(sink: Callable[[LogRecord], None]) -> None:
    """Call ``sink`` with every line any logger writes (a node's ``/rosout``)."""
    _SINKS.append(sink)


def remove_sink(sink: Callable[[LogRecord], None]) -> None:
    if sink in _SINKS:
        _SINKS.remove(sink)


def get_logger(name: str) -> RcutilsLogger:
    """The logger called ``name`` (one object per name)."""
    with _lock:
        found = _loggers.get(name)
        if found is None:
            found = _loggers[name] = RcutilsLogger(name)
        return found


try:
    _default = _env_default()
except ValueError as _exc:  # a bad environment value: said once, the default kept
    sys.stderr.write(f"emailmw: RCUTILS_LOGGING_SEVERITY: {_exc}\n")
