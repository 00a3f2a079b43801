"""Estimate how many digits a parsed answer would expand to.

sympy happily starts computing 10^{10^{10}} or (100!)! when math-verify
compares numerically. In the main thread time_limit interrupts that, but in
other threads nothing can, so such answers are refused before comparison.
The estimate is an upper bound on log10(|value|), computed without evaluating.
"""

from __future__ import annotations

import math

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
_UNBOUNDED = float("inf")
_FACTORIAL_LIKE = (factorial, factorial2, subfactorial, gamma, RisingFactorial, FallingFactorial)


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
