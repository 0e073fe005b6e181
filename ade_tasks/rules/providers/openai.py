"""`openai`: any Chat Completions endpoint (OpenAI, vLLM, Ollama, LM Studio, gateways)."""

from ade_tasks.rules.providers.declaration import AgentProvider

PROVIDER = AgentProvider("openai")
