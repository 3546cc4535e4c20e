"""The calculator tool: arithmetic evaluated over Python's AST with a whitelist, never ``eval``.

Every operation is bounded before it runs, so no expression can hang or exhaust a worker:
the text length, the syntax tree's size and depth, the size of integer powers and products
(estimated from the operands' bit lengths), factorial's argument and ``round``'s digits.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Annotated

from pydantic import Field

from executor import ToolError
from executor.contract import tool

Number = int | float

MAX_EXPRESSION_CHARS = 1000
MAX_NODES = 500
MAX_DEPTH = 200
# About 3,000 decimal digits: big enough for real arithmetic, small enough to be instant.
MAX_INT_BITS = 10_000
MAX_FACTORIAL = 1000
MAX_ROUND_DIGITS = 100

_OPERATORS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
_REFUSED_OPERATORS: dict[type[ast.operator], str] = {
    ast.BitXor: "'^' is not supported; write powers as 2 ** 10.",
    ast.BitAnd: "'&' (bitwise and) is not supported.",
    ast.BitOr: "'|' (bitwise or) is not supported.",
    ast.LShift: "'<<' (shift) is not supported; use * 2 ** n.",
    ast.RShift: "'>>' (shift) is not supported; use // 2 ** n.",
    ast.MatMult: "'@' is not supported.",
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
# Operator and context tags are children in the AST but not parts of the expression.
_MARKER_NODES = (ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.expr_context)


@tool(concurrency_safe=True, read_only=True)
def calculator(
    expression: Annotated[
        str,
        Field(
            description="An arithmetic expression, e.g. '2 + 3 * 4' or 'sqrt(2) * pi'. "
            "Operators: + - * / // % ** and parentheses. Functions: sqrt, abs, round, floor, "
            "ceil, log (natural, or log(x, base)), log10, exp, sin, cos, tan (radians), "
            "factorial, min, max. Constants: pi, e."
        ),
    ],
) -> str:
    """Evaluate an arithmetic expression exactly (integers) or in floating point, safely."""
    text = expression.strip()
    if not text:
        raise ToolError("The expression is empty. Give an arithmetic expression like '2 + 3 * 4'.")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(
            f"The expression is {len(text)} characters long; at most {MAX_EXPRESSION_CHARS} are "
            "accepted. Split the calculation into smaller steps."
        )
    tree = _parse(text)
    _check_size(tree)
    result = _Evaluator().evaluate(tree.body)
    return f"{text} = {_format(result)}"


def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise ToolError(
            f"Syntax error in the expression{where}: {exc.msg}. Check the parentheses and "
            "operators; write multiplication explicitly (2 * x) and powers as **."
        ) from None
    except (ValueError, RecursionError, MemoryError):
        raise ToolError(
            "The expression could not be parsed (too deeply nested or containing invalid "
            "characters). Simplify it."
        ) from None


def _check_size(tree: ast.Expression) -> None:
    """Refuse trees too large or deep to evaluate quickly with a recursive evaluator."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ToolError(
                f"The expression has more than {MAX_NODES} parts; split it into smaller steps."
            )
        if depth > MAX_DEPTH:
            raise ToolError(
                f"The expression is nested more than {MAX_DEPTH} levels deep; simplify it."
            )
        stack.extend(
            (child, depth + 1)
            for child in ast.iter_child_nodes(node)
            if not isinstance(child, _MARKER_NODES)
        )


class _Evaluator:
    """Walks a checked tree; every node type not handled here is refused by name."""

    def evaluate(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Constant):
            return _constant(node.value)
        if isinstance(node, ast.BinOp):
            return self._binary(node)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node)
        if isinstance(node, ast.Name):
            if node.id in _CONSTANTS:
                return _CONSTANTS[node.id]
            if node.id in _FUNCTIONS:
                raise ToolError(f"{node.id} is a function; call it like {node.id}(2).")
            raise ToolError(f"Unknown name {node.id!r}. {_ALLOWED}")
        if isinstance(node, ast.Call):
            return self._call(node)
        raise ToolError(_refusal(node))

    def _binary(self, node: ast.BinOp) -> Number:
        op_type = type(node.op)
        if op_type in _REFUSED_OPERATORS:
            raise ToolError(_REFUSED_OPERATORS[op_type])
        left = self.evaluate(node.left)
        right = self.evaluate(node.right)
        symbol = _OPERATORS[op_type]
        return _checked(_apply(symbol, left, right))

    def _unary(self, node: ast.UnaryOp) -> Number:
        if isinstance(node.op, ast.USub):
            return -self.evaluate(node.operand)
        if isinstance(node.op, ast.UAdd):
            return +self.evaluate(node.operand)
        if isinstance(node.op, ast.Not):
            raise ToolError("'not' is not supported: the calculator does arithmetic only.")
        raise ToolError("'~' (bitwise not) is not supported.")

    def _call(self, node: ast.Call) -> Number:
        if not isinstance(node.func, ast.Name):
            raise ToolError(
                f"Only the calculator's own functions can be called. {_ALLOWED}"
                if not isinstance(node.func, ast.Attribute)
                else f"Attribute access (.{node.func.attr}) is not allowed. {_ALLOWED}"
            )
        name = node.func.id
        if name not in _FUNCTIONS:
            raise ToolError(f"Unknown function {name!r}. {_ALLOWED}")
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise ToolError(f"{name}() takes plain positional arguments only, e.g. {name}(2).")
        low, high, function = _FUNCTIONS[name]
        if not low <= len(node.args) <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            raise ToolError(f"{name}() takes {expected} argument(s), got {len(node.args)}.")
        args = [self.evaluate(arg) for arg in node.args]
        try:
            return _checked(function(*args))
        except ToolError:
            raise
        except OverflowError:
            raise ToolError(f"{name}() overflowed: the result is too large.") from None
        except (ValueError, ZeroDivisionError) as exc:
            raise ToolError(f"{name}() is not defined for these arguments ({exc}).") from None


def _constant(value: object) -> Number:
    if isinstance(value, bool):
        raise ToolError("True and False are not numbers here; use 1 and 0.")
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, complex):
        raise ToolError("Complex numbers are not supported.")
    if isinstance(value, (str, bytes)):
        raise ToolError("Strings are not allowed: the calculator evaluates numbers only.")
    raise ToolError(f"{value!r} is not allowed: the calculator evaluates numbers only.")


def _apply(symbol: str, left: Number, right: Number) -> Number:
    try:
        if symbol == "+":
            return left + right
        if symbol == "-":
            return left - right
        if symbol == "*":
            _guard_product(left, right)
            return left * right
        if symbol == "**":
            return _power(left, right)
        if symbol == "/":
            return left / right
        if symbol == "//":
            return left // right
        return left % right
    except ZeroDivisionError:
        kind = "Division" if symbol in ("/", "//") else "Modulo"
        raise ToolError(f"{kind} by zero in the expression.") from None
    except OverflowError:
        raise ToolError(
            f"The result of {symbol!r} is too large for a floating-point number (over about "
            "1.8e308)."
        ) from None


def _guard_product(left: Number, right: Number) -> None:
    if (
        isinstance(left, int)
        and isinstance(right, int)
        and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1
    ):
        raise _too_large()


def _power(base: Number, exponent: Number) -> Number:
    if isinstance(base, int) and isinstance(exponent, int) and exponent >= 0:
        # Compared as a quotient: the product of a huge exponent and a float overflows.
        if abs(base) > 1 and exponent > MAX_INT_BITS / math.log2(abs(base)):
            raise _too_large()
        result: int = base**exponent
        return result
    if base == 0 and exponent < 0:
        raise ToolError("0 cannot be raised to a negative power (that divides by zero).")
    try:
        # math.pow, unlike **, never returns a complex number for a negative base.
        return math.pow(base, exponent)
    except ValueError:
        raise ToolError(
            f"A negative base ({_format(base)}) raised to a fractional power "
            f"({_format(exponent)}) has no real result."
        ) from None


def _checked(value: Number) -> Number:
    """Refuse results that are too large to carry on with: huge integers, inf or nan."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("The result is too large for a floating-point number (over about 1.8e308).")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _too_large()
    return value


def _too_large() -> ToolError:
    return ToolError(
        f"The result would have more than about {int(MAX_INT_BITS * math.log10(2))} digits, "
        "which is more than the calculator computes. Use smaller numbers, or floats "
        "(e.g. 10.0 ** 300) for an approximate value."
    )


def _factorial(n: Number) -> Number:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 0:
        raise ToolError("factorial() needs a whole number of 0 or more.")
    if n > MAX_FACTORIAL:
        raise ToolError(
            f"factorial({n}) is too large; the calculator computes factorials up to "
            f"factorial({MAX_FACTORIAL})."
        )
    return math.factorial(n)


def _round(x: Number, digits: Number = 0) -> Number:
    if not isinstance(digits, int):
        raise ToolError("round()'s second argument (digits) must be a whole number.")
    if abs(digits) > MAX_ROUND_DIGITS:
        raise ToolError(f"round() takes at most {MAX_ROUND_DIGITS} digits either way.")
    return round(x, digits) if digits else round(x)


def _log(x: Number, base: Number | None = None) -> Number:
    return math.log(x) if base is None else math.log(x, base)


_FUNCTIONS: dict[str, tuple[int, int, Callable[..., Number]]] = {
    "sqrt": (1, 1, math.sqrt),
    "abs": (1, 1, abs),
    "round": (1, 2, _round),
    "floor": (1, 1, math.floor),
    "ceil": (1, 1, math.ceil),
    "log": (1, 2, _log),
    "log10": (1, 1, math.log10),
    "exp": (1, 1, math.exp),
    "sin": (1, 1, math.sin),
    "cos": (1, 1, math.cos),
    "tan": (1, 1, math.tan),
    "factorial": (1, 1, _factorial),
    "min": (1, 99, lambda *values: min(values)),
    "max": (1, 99, lambda *values: max(values)),
}
_ALLOWED = (
    "Allowed: numbers, + - * / // % ** and parentheses; functions "
    + ", ".join(_FUNCTIONS)
    + "; constants "
    + ", ".join(_CONSTANTS)
    + "."
)
_DESCRIPTIONS: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access",
    ast.Subscript: "indexing",
    ast.Compare: "comparisons",
    ast.BoolOp: "'and' / 'or'",
    ast.IfExp: "conditional expressions",
    ast.Lambda: "lambda",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.List: "lists",
    ast.Tuple: "tuples (a stray comma?)",
    ast.Set: "sets",
    ast.Dict: "dictionaries",
    ast.NamedExpr: "assignment (:=)",
    ast.JoinedStr: "strings",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Starred: "unpacking (*)",
}


def _refusal(node: ast.AST) -> str:
    what = _DESCRIPTIONS.get(type(node), type(node).__name__)
    return f"Not allowed in an arithmetic expression: {what}. {_ALLOWED}"


def _format(value: Number) -> str:
    return str(value) if isinstance(value, int) else repr(value)
