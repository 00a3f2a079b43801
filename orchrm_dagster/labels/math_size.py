"""Refuse answers whose value is too large to compute.

sympy happily starts computing 10^{10^{10}} or (100!)! when math-verify
compares numerically, and latex2sympy already evaluates \binom while parsing.
Such a computation is one long C call: no signal or watchdog interrupts it
outside the main thread, and it stalls every thread by holding the GIL.
So answers are screened twice: the text before parsing, and the parsed
expression (an upper bound on log10(|value|), computed without evaluating)
before comparison.
"""

from __future__ import annotations

import math
import re

from sympy import Add, Basic, Float, Integer, MatrixBase, Mul, Pow, Rational
from sympy.functions.combinatorial.factorials import (
    FallingFactorial,
    RisingFactorial,
    factorial,
    factorial2,
    subfactorial,
)
from sympy.functions.special.gamma_functions import gamma

MAX_DIGITS = 1_000_000
_RISKY_TEXT = (
    re.compile(r"\^\s*\{[-+\d\s.]*\^"),  # numeric tower: 10^{10^{10}}
    re.compile(r"\^\s*\{[-+\d\s.]*\}\s*\^|\^\s*[\d.]+\s*\^"),  # chained: 2^{10}^{10}, 2^10^10
    re.compile(r"\^\s*\{?\s*[-+]?\d{7,}"),  # exponent of a million or more
    re.compile(r"(?:binom|choose)[^$\n]{0,80}?(?:\d{5}|\^)"),  # \binom is evaluated while parsing
)
_UNBOUNDED = float("inf")
_FACTORIAL_LIKE = (factorial, factorial2, subfactorial, gamma, RisingFactorial, FallingFactorial)


def text_too_large_to_parse(text: str) -> bool:
    return any(pattern.search(text) for pattern in _RISKY_TEXT)


def too_large_to_evaluate(expr: object) -> bool:
    try:
        return digits_bound(expr) > MAX_DIGITS
    except RecursionError:
        return True


def digits_bound(expr: object) -> float:
    if isinstance(expr, MatrixBase):
        return max((digits_bound(entry) for entry in expr), default=0.0)
    if not isinstance(expr, Basic):
        return 0.0
    if isinstance(expr, Integer):
        return _int_digits(expr.p)
    if isinstance(expr, Rational):
        return max(_int_digits(expr.p), _int_digits(expr.q))
    if isinstance(expr, Float):
        return _float_digits(expr)
    if isinstance(expr, Pow):
        return _power_digits(expr)
    if isinstance(expr, _FACTORIAL_LIKE):
        return _factorial_digits(expr)
    if isinstance(expr, Mul):
        return sum(digits_bound(arg) for arg in expr.args)
    if isinstance(expr, Add):
        return max((digits_bound(arg) for arg in expr.args), default=0.0) + math.log10(len(expr.args))
    return max((digits_bound(arg) for arg in expr.args), default=0.0)


def _int_digits(value: int) -> float:
    return abs(value).bit_length() * math.log10(2)


def _float_digits(value: Float) -> float:
    try:
        return math.log10(abs(float(value)) + 1.0)
    except (OverflowError, ValueError):
        return _UNBOUNDED


def _power_digits(power: Pow) -> float:
    base_digits = digits_bound(power.base)
    if power.exp.free_symbols:
        return base_digits  # stays symbolic, nothing gets expanded
    exponent_digits = digits_bound(power.exp)
    if exponent_digits > 15:
        return _UNBOUNDED
    return base_digits * 10.0**exponent_digits


def _factorial_digits(function: Basic) -> float:
    argument_digits = max((digits_bound(arg) for arg in function.args), default=0.0)
    if argument_digits > 7:
        return _UNBOUNDED
    n = 10.0**argument_digits
    return n * argument_digits  # log10(n!) <= n * log10(n)
