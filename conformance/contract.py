"""Backend functions the contract requires beyond the ones in vector files.

The key/value cache API of incremental decoding (spec/components/greedy_decode.md,
"Incremental decoding (backend API)"; spec/components/llama.md for the Llama cache) has no
golden vectors; the properties ``test_incremental_decoding_with_cache_equals_full_decoding``
and ``test_llama_incremental_decoding_with_cache_equals_full_forward`` check it. The
completeness test requires these too, and ``attnspec new-backend`` stubs them.
"""

# (name, module, signature for the scaffold, what it returns)
EXTRA_FUNCTIONS = (
    ("decoder_only_init_cache", "decoding",
     "*, batch_size, num_layers, num_heads, params", "cache"),
    ("decoder_only_step", "decoding",
     "ids, cache, *, pad_id, num_layers, num_heads, norm='pre', eps=1e-05, activation='gelu', "
     "tie_embeddings=False, params", "(logits, new_cache)"),
    ("llama_init_cache", "decoding",
     "*, batch_size, num_layers, num_heads, num_kv_heads=None, params", "cache"),
    ("llama_step", "decoding",
     "ids, cache, *, pad_id, num_layers, num_heads, num_kv_heads=None, eps=1e-06, "
     "rope_base=10000.0, window=None, rope_scaling=None, rotary_dim=None, params",
     "(logits, new_cache)"),
    ("mla_init_cache", "decoding", "*, batch_size, params", "cache"),
    ("mla_step", "decoding",
     "x, cache, mask=None, *, num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, "
     "eps=1e-06, rope_base=10000.0, rope_convention='interleaved', yarn_factor=1.0, "
     "mscale_all_dim=0.0, rope_scaling=None, params", "(y, new_cache)"),
)
