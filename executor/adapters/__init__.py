"""The pool's tools inside agent frameworks, each an optional extra.

- ``executor.adapters.openai_agents`` (``pip install 'toolpool[openai-agents]'``): the pool's
  tools as OpenAI Agents SDK function tools;
- ``executor.adapters.pydantic_ai`` (``pip install 'toolpool[pydantic-ai]'``): the pool's
  tools as a pydantic-ai toolset;
- ``executor.adapters.langgraph`` (``pip install 'toolpool[langgraph]'``): the pool's tools
  as LangChain tools, and a LangGraph ``ToolNode`` of them.

All send the calls a model response asks for together as one pool turn (``TurnBatcher``), so
the pool's order holds: reads together, writes and shell commands alone, in the model's order.
"""

from __future__ import annotations

from executor.adapters._batch import TurnBatcher

__all__ = ["TurnBatcher"]
