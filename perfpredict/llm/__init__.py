"""LLM serving questions: prefill, decode with a KV cache, tokens/s, KV memory and quantized weights."""
