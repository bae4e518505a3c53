"""OpenAI-compatible HTTP server with batched, streaming lookahead decoding (`lopa serve`)."""
