"""Development services: the servers a local stack, the demo and the tests run beside Chukwa so
it works offline — the toy HTTP sources, the toy MCP server (the park lamp) and the embedded
model (SmolLM2 through llama.cpp, an OpenAI-compatible endpoint). Chukwa reaches them only over
HTTP, as it reaches any other source; no domain app imports them."""
