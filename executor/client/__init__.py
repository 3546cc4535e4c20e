"""The orchestrator's client: submit a turn, collect one result per call, in order."""

from executor._errors import TurnError
from executor.client._async import AsyncExecutor
from executor.client._executor import Executor, Turn
from executor.client._messages import anthropic_tool_results, openai_tool_messages
from executor.client._sessions import Sessions

__all__ = [
    "AsyncExecutor",
    "Executor",
    "Sessions",
    "Turn",
    "TurnError",
    "anthropic_tool_results",
    "openai_tool_messages",
]
