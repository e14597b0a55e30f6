"""The embedded local model (being split into its parts; see ``server``)."""

from cognition_app.embedded_llm.server import MODEL_NAME, EmbeddedLLMServer, parse_request, serve

__all__ = ["MODEL_NAME", "EmbeddedLLMServer", "parse_request", "serve"]
