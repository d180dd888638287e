"""Content-filtered topics (rclpy's ``ContentFilterOptions``): a DDS filter expression (the
SQL subset of the DDS specification, Annex B) compiled once into a predicate on messages.
Pure: no I/O; a compiled filter is immutable and thread-safe.

Supported, as DDS has them::

    FIELD op VALUE          op: = <> != < <= > >= LIKE
    FIELD [NOT] BETWEEN VALUE AND VALUE
    condition AND condition, condition OR condition, NOT condition, ( condition )

``FIELD`` is a field path (``pose.position.x``, ``data``, ``ranges[0]``); ``VALUE`` a number,
a ``'string'``, ``TRUE``/``FALSE``, or ``%N``, the N-th expression parameter (itself a
number, a quoted string or a boolean, as DDS writes them). ``LIKE`` takes ``%`` (any run)
and ``_`` (any one character). Keywords are case-insensitive. A comparison of a field the
message does not have, or of values that do not compare, is false.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .errors import InvalidArgumentError

__all__ = ["ContentFilter", "compile_filter"]

_TOKEN: Final = re.compile(
    r"""\s*(?:
        (?P<number>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
      | (?P<string>'(?:[^']|'')*'|`(?:[^`])*`)
      | (?P<param>%\d+)
      | (?P<op><>|!=|<=|>=|=|<|>)
      | (?P<paren>[()])
      | (?P<name>[A-Za-z_][A-Za-z_0-9]*(?:\[\d+\])*(?:\.[A-Za-z_][A-Za-z_0-9]*(?:\[\d+\])*)*)
    )""",
    re.X,
)
_KEYWORDS: Final = frozenset({"AND", "OR", "NOT", "LIKE", "BETWEEN", "TRUE", "FALSE"})

Predicate = Callable[[Any], bool]


@dataclass(frozen=True)
class ContentFilter:
    """A compiled filter: :meth:`matches` says whether a message passes it."""

    expression: str
    parameters: tuple[str, ...]
    _predicate: Predicate

    def matches(self, message: Any) -> bool:
        try:
            return bool(self._predicate(message))
        except (TypeError, ValueError):
            return False


def _literal(text: str, where: str) -> Any:
    """A DDS literal: a number, a quoted string, TRUE/FALSE."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == "`":
        return text[1:-1]
    if text.upper() in ("TRUE", "FALSE"):
        return text.upper() == "TRUE"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{where}: {text!r} is not a number, a 'quoted string' or TRUE/FALSE"
        ) from None


_MISSING: Final = object()


def _field(path: str) -> Callable[[Any], Any]:
    steps: list[str | int] = []
    for part in path.split("."):
        name, *indexes = re.split(r"\[|\]\[|\]", part)
        steps.append(name)
        steps += [int(i) for i in indexes if i]

    def get(message: Any) -> Any:
        value = message
        for step in steps:
            try:
                value = value[step] if isinstance(step, int) else getattr(value, step)
            except (AttributeError, IndexError, TypeError):
                return _MISSING
        return value

    return get


def _like(pattern: str) -> re.Pattern[str]:
    translated = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.compile(translated + r"\Z", re.S)


class _Parser:
    def __init__(self, expression: str, parameters: Sequence[str]) -> None:
        self.expression = expression
        self.parameters = list(parameters)
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(expression):
            if expression[pos:].strip() == "":
                break
            match = _TOKEN.match(expression, pos)
            if match is None or match.end() == pos:
                raise self.error(f"cannot read {expression[pos:].strip()[:20]!r}")
            kind = match.lastgroup or ""
            text = match.group(kind)
            if kind == "name" and text.upper() in _KEYWORDS:
                kind, text = "keyword", text.upper()
            self.tokens.append((kind, text))
            pos = match.end()
        self.at = 0

    def error(self, what: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"content filter {self.expression!r}: {what}")

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, kind: str, text: str | None = None) -> str:
        found = self.peek()
        if found[0] != kind or (text is not None and found[1] != text):
            raise self.error(f"expected {text or kind}, found {found[1] or 'the end'}")
        self.at += 1
        return found[1]

    def parse(self) -> Predicate:
        predicate = self.disjunction()
        if self.peek()[0] != "end":
            raise self.error(f"unexpected {self.peek()[1]!r}")
        return predicate

    def disjunction(self) -> Predicate:
        parts = [self.conjunction()]
        while self.peek() == ("keyword", "OR"):
            self.at += 1
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else (lambda m: any(p(m) for p in parts))

    def conjunction(self) -> Predicate:
        parts = [self.negation()]
        while self.peek() == ("keyword", "AND"):
            self.at += 1
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else (lambda m: all(p(m) for p in parts))

    def negation(self) -> Predicate:
        if self.peek() == ("keyword", "NOT"):
            self.at += 1
            inner = self.negation()
            return lambda m: not inner(m)
        if self.peek() == ("paren", "("):
            self.at += 1
            inner = self.disjunction()
            self.take("paren", ")")
            return inner
        return self.comparison()

    def value(self) -> Any:
        kind, text = self.peek()
        self.at += 1
        if kind == "param":
            index = int(text[1:])
            if index >= len(self.parameters):
                raise self.error(f"{text} names a parameter not given "
                                 f"({len(self.parameters)} given)")  # fmt: skip
            return _literal(self.parameters[index], f"parameter {text}")
        if kind in ("number", "string"):
            return _literal(text, "value")
        if kind == "keyword" and text in ("TRUE", "FALSE"):
            return text == "TRUE"
        raise self.error(f"expected a value, found {text or 'the end'}")

    def comparison(self) -> Predicate:
        field = _field(self.take("name"))
        kind, text = self.peek()
        negate = False
        if (kind, text) == ("keyword", "NOT"):
            self.at += 1
            negate = True
            kind, text = self.peek()
        if (kind, text) == ("keyword", "BETWEEN"):
            self.at += 1
            low = self.value()
            self.take("keyword", "AND")
            high = self.value()

            def between(m: Any) -> bool:
                value = field(m)
                return value is not _MISSING and low <= value <= high

            return (lambda m: not between(m)) if negate else between
        if negate:
            raise self.error("NOT goes before a condition or BETWEEN")
        if (kind, text) == ("keyword", "LIKE"):
            self.at += 1
            pattern = self.value()
            if not isinstance(pattern, str):
                raise self.error("LIKE takes a 'string'")
            compiled = _like(pattern)
            return lambda m: isinstance(v := field(m), str) and bool(compiled.match(v))
        op = self.take("op")
        value = self.value()
        compare: dict[str, Callable[[Any, Any], bool]] = {
            "=": lambda a, b: bool(a == b), "<>": lambda a, b: bool(a != b),
            "!=": lambda a, b: bool(a != b), "<": lambda a, b: bool(a < b),
            "<=": lambda a, b: bool(a <= b), ">": lambda a, b: bool(a > b),
            ">=": lambda a, b: bool(a >= b),
        }  # fmt: skip
        test = compare[op]
        return lambda m: (v := field(m)) is not _MISSING and test(v, value)


def compile_filter(expression: str, parameters: Sequence[str] = ()) -> ContentFilter:
    """``expression`` with ``parameters`` (``%0`` ...) compiled; a mistake is one
    :class:`~emailmw.InvalidArgumentError` naming it."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidArgumentError("a content filter needs an expression, such as \"data = 'x'\"")
    return ContentFilter(expression, tuple(parameters), _Parser(expression, parameters).parse())
