"""The composites, written once for every backend: layers and stacks, the three models,
greedy and cached decoding, the GRU encoder-decoder with attention.

A composite calls only two things of a backend (``k`` below, a :class:`Kernels`):

- ``k.ops``: the backend's primitive array ops, the module ``<package>.ops``
  (``concat``, ``where``, ``argmax``...; the list is ``OPS``);
- ``k.<spec function>``: the backend's own components (``k.mha``, ``k.layer_norm``...),
  looked up in the backend's spec modules when first called, so a backend that writes
  its own version of a composite (``encoder_layer`` in its ``layers.py``) gets it used
  by every composite above it too.

A backend's ``layers.py`` is then one line, ``encoder_layer, decoder_layer, encoder,
decoder = Layers.bind(__package__)`` (see ``backends/README.md``). The composites contain no
framework call, so inside ``tf.function`` they run only the TensorFlow ops module.
"""

from __future__ import annotations

import importlib

# The primitive surface each backend's ``ops`` module provides: name -> (signature, what it
# returns). Arrays are the backend's own; ``like`` names the array whose dtype (and device)
# the result takes. `attnspec new-backend` writes a stub of each.
OPS = {
    "floating": ("name, x, like=None", "x if it is a floating array, else DTypeError naming "
                 "`name`; with like, also of like's dtype (and device)"),
    "integers": ("name, x", "x if it holds integers, else DTypeError naming `name`"),
    "linear": ("x, p, w, b, d_in, d_out=None", "x @ p[w] + p[b] over the last axis (b "
               "optional), p[w] shape-checked as (d_in, d_out)"),
    "split_heads": ("x, heads", "(B, T, H*K) -> (B, H, T, K): head h is columns h*K:(h+1)*K"),
    "merge_heads": ("x", "(B, H, T, V) -> (B, T, H*V)"),
    "matmul": ("a, b", "a @ b"),
    "tanh": ("x", "tanh(x), elementwise"),
    "concat": ("xs, axis", "the arrays xs joined along axis"),
    "stack": ("xs, axis", "the arrays xs stacked along a new axis"),
    "unstack": ("x, axis", "the list of slices of x along axis"),
    "where": ("c, a, b", "a where c else b; a or b may be a Python scalar"),
    "argmax": ("x, axis", "int64 index of the maximum along axis (ties: the lowest; bool x "
               "allowed)"),
    "any_": ("x, axis", "logical or along axis"),
    "all_": ("x", "a scalar bool array: every element True (True when empty)"),
    "known_all": ("x", "Python bool: every element is known to be True (False where the "
                  "values are not known yet, e.g. while tracing a graph)"),
    "value_check": ("ok, message, *values, error=DomainError", "raise error(message(*values "
                    "as NumPy)) unless the scalar bool ok holds"),
    "zeros": ("shape, like", "zeros of like's dtype (and device)"),
    "falses": ("shape, like=None", "a bool array of False (on like's device)"),
    "full": ("shape, value, like=None", "an int64 array filled with value (on like's device)"),
    "arange": ("start, stop, like=None", "int64 start..stop-1 (on like's device)"),
    "cast": ("x, like", "x in like's dtype (and on its device)"),
    "int64": ("x", "x as int64"),
    "take_rows": ("x, index", "x[b, index[b]] for every row b: (B, S, ...), (B,) -> (B, ...)"),
    "reverse": ("x, axis", "x reversed along axis"),
}

# The spec functions a composite calls, by the spec module that holds them.
MODULES = {
    "layer_norm": "norm", "rms_norm": "norm", "feedforward": "feedforward",
    "gated_feedforward": "feedforward", "rope": "positional", "sliding_window_mask": "attention",
    "mha": "multihead", "sdpa": "attention", "causal_mask": "attention",
    "padding_mask": "attention", "combined_mask": "attention",
    "local_window_mask": "attention",
    "embedding": "embedding", "lm_head": "embedding",
    "sinusoidal_pe": "positional", "learned_pe": "positional",
    "additive_attention": "alignment", "luong_attention": "alignment",
    "gru_cell": "rnn", "gru": "rnn",
    "encoder_layer": "layers", "decoder_layer": "layers", "encoder": "layers",
    "decoder": "layers", "transformer": "models", "encoder_only": "models",
    "decoder_only": "models", "decoder_only_init_cache": "decoding",
    "decoder_only_step": "decoding", "llama_layer": "layers", "llama_decoder_only": "models",
    "llama_init_cache": "decoding", "llama_step": "decoding", "parallel_layer": "layers",
    "cross_entropy": "losses", "decoder_only_loss": "models", "sdpa_varlen": "attention",
    "sdpa_fp8": "attention", "moe_router": "moe", "moe": "moe", "mla": "layers",
    "gemma_layer": "layers", "gemma_decoder_only": "models", "softcap": "attention",
    "t5_bias": "positional", "mixtral_layer": "layers", "deepseek_layer": "layers",
    "deepseek_decoder_only": "models",
    "parallel_decoder_only": "models",
}


def returns_of(name: str) -> tuple[str, ...]:
    """The output names of spec function ``name``, in return order (a composite's VJP, and an
    autodiff backend's ``vjp``, pair each cotangent with its output by these)."""
    from attnspec.spec.vectors import default_spec

    return default_spec().functions[name].returns


class Kernels:
    """One backend as the composites see it: ``ops`` and its spec functions by name."""

    def __init__(self, package: str):
        self.package = package
        self._ops = None

    @property
    def ops(self):
        if self._ops is None:
            self._ops = importlib.import_module(f"{self.package}.ops")
        return self._ops

    def __getattr__(self, name: str):
        if name not in MODULES:
            raise AttributeError(f"composites call no spec function {name!r}")
        fn = getattr(importlib.import_module(f"{self.package}.{MODULES[name]}"), name)
        setattr(self, name, fn)  # looked up once
        return fn


class Composite:
    """Base of the composite families: holds the backend's kernels."""

    EXPORTS: tuple[str, ...] = ()  # the spec functions a family defines

    def __init__(self, k: Kernels):
        self.k = k

    @classmethod
    def bind(cls, package: str, *names: str) -> tuple:
        """The family's spec functions (``names``, default EXPORTS) over the kernels of
        ``package``, in that order."""
        family = cls(Kernels(package))
        return tuple(getattr(family, name) for name in names or cls.EXPORTS)

    @property
    def ops(self):
        return self.k.ops


def shared() -> dict[str, type]:
    """Spec function name -> the family (class) that writes it once for every backend."""
    from .beam import BeamSearch
    from .decoding import Decoding
    from .fp8 import Fp8
    from .layers import GemmaLayers, Layers
    from .mla import Mla
    from .models import T5, GemmaModels, Models, ParallelModels
    from .moe import MoE
    from .moe_layers import MoeLayers
    from .rnn import Seq2Seq
    from .varlen import Varlen

    found = {"residual": Layers}
    for family in (Layers, Models, Decoding, BeamSearch, Seq2Seq, Varlen, Fp8, MoE, Mla,
                   GemmaLayers, GemmaModels, T5, MoeLayers, ParallelModels):
        found.update(dict.fromkeys(family.__dict__["EXPORTS"], family))
    return found
