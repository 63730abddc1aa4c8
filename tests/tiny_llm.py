"""A tiny Llama config (2 layers, 256 features) whose serving-engine tables build in a fraction of a second."""

TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 1024,
    "torch_dtype": "float16",
}
