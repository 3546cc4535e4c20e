"""The calculator: arithmetic over a whitelisted AST, and every way to abuse it refused fast."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from executor import ErrorType, ToolResult, ToolStatus
from workers.tools import calculator

RunTool = Callable[..., ToolResult]


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 ** 3 ** 2", "512"),
        ("-2 ** 2", "-4"),
        ("+5 - -3", "8"),
        ("10 / 4", "2.5"),
        ("10 / 2", "5.0"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** -1", "0.5"),
        ("(-2) ** 3", "-8"),
        ("0.1 + 0.2", "0.30000000000000004"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("sqrt(16)", "4.0"),
        ("abs(-3)", "3"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("floor(2.7) + ceil(2.1)", "5"),
        ("log(8, 2)", "3.0"),
        ("log(e)", "1.0"),
        ("log10(1000)", "3.0"),
        ("exp(0)", "1.0"),
        ("sin(pi / 2) + cos(0) + tan(0)", "2.0"),
        ("factorial(20)", "2432902008176640000"),
        ("max(1, 5, 3) - min(2.5, 1)", "4"),
        ("pi", "3.141592653589793"),
        ("+".join(["1"] * 150), "150"),
    ],
)
def test_arithmetic(run_tool: RunTool, expression: str, answer: str) -> None:
    result = run_tool(calculator, expression=expression)

    assert result.status is ToolStatus.OK, result.content
    assert result.content == f"{expression} = {answer}"


def test_surrounding_space_is_ignored(run_tool: RunTool) -> None:
    assert run_tool(calculator, expression="  1 + 1\n").content == "1 + 1 = 2"


def test_largest_allowed_factorial_is_exact(run_tool: RunTool) -> None:
    result = run_tool(calculator, expression="factorial(1000)")

    assert result.status is ToolStatus.OK
    assert result.original_chars == len("factorial(1000) = ") + 2568  # 1000! has 2568 digits


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9**9**9", "more than about 3010 digits"),
        ("10**100000", "more than about 3010 digits"),
        ("(2**5000)**(2**5000)", "more than about 3010 digits"),
        ("2**9000 * 2**9000", "more than about 3010 digits"),
        ("*".join(["(10**3000)"] * 20), "more than about 3010 digits"),
        ("factorial(100000)", "factorial(100000) is too large"),
        ("factorial(10**30)", "too large"),
        ("1e308 * 10", "too large for a floating-point number"),
        ("1e308 ** 2", "too large for a floating-point number"),
        ("10**400 / 3", "too large for a floating-point number"),
        ("exp(1000)", "exp() overflowed"),
        ("round(1, -10**9)", "round() takes at most 100 digits"),
        ("(" * 500 + "1" + ")" * 500, "at most 1000 are accepted"),
        ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
        ("-" * 900 + "1", "nested more than 200 levels"),
        ("+".join(["1"] * 400), "nested more than 200 levels"),
        ("max(" + ",".join(["1+1"] * 240) + ")", "more than 500 parts"),
        ("1" * 1001, "at most 1000 are accepted"),
    ],
)
def test_bombs_are_refused_fast(run_tool: RunTool, expression: str, message: str) -> None:
    started = time.monotonic()

    result = run_tool(calculator, expression=expression)

    assert time.monotonic() - started < 1.0
    assert result.error_type is ErrorType.TOOL_ERROR
    assert message in result.content


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "Division by zero"),
        ("1 // 0.0", "Division by zero"),
        ("5 % 0", "Modulo by zero"),
        ("0 ** -1", "0 cannot be raised to a negative power"),
        ("(-8) ** (1/3)", "has no real result"),
        ("sqrt(-1)", "sqrt() is not defined for these arguments"),
        ("log(0)", "log() is not defined"),
        ("factorial(-1)", "factorial() needs a whole number"),
        ("factorial(2.5)", "factorial() needs a whole number"),
        ("sqrt(1, 2)", "sqrt() takes 1 argument(s), got 2"),
        ("round()", "round() takes 1 to 2 argument(s), got 0"),
    ],
)
def test_math_errors(run_tool: RunTool, expression: str, message: str) -> None:
    result = run_tool(calculator, expression=expression)

    assert result.error_type is ErrorType.TOOL_ERROR
    assert message in result.content


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("2 +", "Syntax error in the expression"),
        ("(1 + 2", "Syntax error in the expression"),
        ("2 x", "Syntax error in the expression"),
        ("", "The expression is empty"),
        ("   ", "The expression is empty"),
        ("__import__('os')", "Unknown function '__import__'"),
        ("__import__('os').system('true')", "Attribute access (.system) is not allowed"),
        ("(1).real", "attribute access"),
        ("math.pi", "attribute access"),
        ("pow(2, 3)", "Unknown function 'pow'"),
        ("x + 1", "Unknown name 'x'"),
        ("sqrt", "sqrt is a function"),
        ("'a' * 3", "Strings are not allowed"),
        ("f'{1}'", "strings"),
        ("lambda: 1", "lambda"),
        ("[i for i in (1, 2)]", "comprehensions"),
        ("[1, 2]", "lists"),
        ("1, 2", "tuples"),
        ("1 < 2", "comparisons"),
        ("1 and 2", "'and' / 'or'"),
        ("1 if 1 else 2", "conditional"),
        ("(y := 2)", "assignment"),
        ("True + 1", "True and False are not numbers"),
        ("2j", "Complex numbers"),
        ("2 ^ 10", "'^' is not supported; write powers as 2 ** 10"),
        ("~1", "bitwise not"),
        ("max(*[1, 2])", "plain positional arguments only"),
        ("round(2.5, ndigits=1)", "plain positional arguments only"),
        ("round(2.5, 1.5)", "must be a whole number"),
    ],
)
def test_refused_input_names_the_problem(run_tool: RunTool, expression: str, message: str) -> None:
    result = run_tool(calculator, expression=expression)

    assert result.status is ToolStatus.ERROR
    assert result.error_type is ErrorType.TOOL_ERROR
    assert message in result.content


def test_unknown_names_list_what_is_allowed(run_tool: RunTool) -> None:
    result = run_tool(calculator, expression="hypot(3, 4)")

    assert "Allowed: numbers, + - * / // % ** and parentheses" in result.content
    assert "factorial" in result.content


def test_flags_follow_the_seed_table() -> None:
    assert calculator.is_concurrency_safe
    assert calculator.is_read_only
    assert calculator.max_result_chars is None
