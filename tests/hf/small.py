"""Small transformers layers from local configs (no download), every parameter random."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import BertConfig, GPT2Config, LlamaConfig  # noqa: E402
from transformers.models.bert.modeling_bert import BertLayer  # noqa: E402
from transformers.models.gpt2.modeling_gpt2 import GPT2Block  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaDecoderLayer  # noqa: E402

DT = torch.float64


def randomized(module, seed=0):
    """float64, eval, every weight N(0, 0.3^2) and every norm gain 1 + N(0, 0.2^2)."""
    torch.manual_seed(seed)
    module = module.to(DT).eval()
    with torch.no_grad():
        for name, p in module.named_parameters():
            gain = "norm" in name.lower() or name.startswith("ln_")
            p.copy_((1 if gain and name.endswith("weight") else 0) + 0.3 * torch.randn_like(p))
    return module


def bert(hidden_act="gelu", **config):
    c = BertConfig(hidden_size=12, num_attention_heads=3, intermediate_size=20,
                   hidden_act=hidden_act, attn_implementation="eager", **config)
    return randomized(BertLayer(c))


def gpt2(activation_function="gelu_new", **config):
    c = GPT2Config(n_embd=12, n_head=3, n_inner=20, activation_function=activation_function,
                   attn_implementation="eager", **config)
    return randomized(GPT2Block(c, layer_idx=0))


def llama(**config):
    """GQA (H = 4, H_kv = 2) and head_dim 6 != D / H = 4, so head slicing is exercised."""
    base = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4,
                num_key_value_heads=2, head_dim=6, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 100.0},
                attn_implementation="eager")
    return randomized(LlamaDecoderLayer(LlamaConfig(**{**base, **config}), layer_idx=0))


def x_of(b, t, d, seed=1):
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


def llama_lm(num_hidden_layers=2, vocab_size=11, **config):
    """LlamaForCausalLM around llama()'s layer config, untied lm_head."""
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    c = llama(**config).self_attn.config
    c.vocab_size, c.num_hidden_layers, c.tie_word_embeddings = vocab_size, num_hidden_layers, False
    return randomized(LlamaForCausalLM(c))
