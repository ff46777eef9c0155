"""RoPE settings between transformers' ``rope_parameters`` and the spec's Llama attributes
(``rope_base``, ``rope_scaling``, ``rotary_dim``), for the converters of :mod:`.hf` (Llama) and
:mod:`.hf_zoo` (Mistral, Qwen2, Phi-3).

transformers 5 keeps every RoPE setting in ``config.rope_parameters``: ``rope_theta`` (the
spec's ``rope_base``), ``rope_type`` and the rule's fields, and ``partial_rotary_factor``
(the spec's ``rotary_dim = int(head_dim * partial_rotary_factor)``, as its rope
initialisation computes ``dim``); the rules ``dynamic`` and ``longrope`` also read
``config.max_position_embeddings``. The spec's ``rope_scaling`` is the same dict less
``rope_theta`` and ``partial_rotary_factor``, with ``max_position_embeddings`` in it
(spec/components/rope_frequencies.md). A rule the spec does not state (transformers 5's
``proportional``) or a field the rule does not read raises ConfigError naming the field.
"""

from __future__ import annotations

from attnspec.spec.errors import ConfigError

from .. import _checks
from .._rope import ROPE_TYPES

# the rope_parameters fields each rule reads (besides rope_type, rope_theta and
# partial_rotary_factor), as transformers' _compute_<rule>_parameters reads them
FIELDS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "attention_factor", "truncate"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor",
               "high_freq_factor"),
    "longrope": ("factor", "original_max_position_embeddings", "attention_factor",
                 "short_factor", "long_factor"),
}
COMMON = ("rope_type", "rope_theta", "partial_rotary_factor")


def from_hf(who: str, c, rope: dict | None, head_dim: int, partial: bool) -> dict:
    """The spec attributes of a config's rope_parameters ``rope`` (one layer type's):
    ``{"rope_base": ..., ["rope_scaling": {...}], ["rotary_dim": R]}``. ``partial``: whether
    the module applies a partial rotary (Phi-3 does; Llama, Mistral, Qwen2 rotate q whole, so
    a partial_rotary_factor there is refused)."""
    rope = dict(rope or {})
    kind = rope.get("rope_type", "default")
    if kind not in ROPE_TYPES:
        _unsupported(who, "rope_parameters.rope_type", kind,
                     f"the spec states the rules {list(ROPE_TYPES)}")
    fields = FIELDS[kind]
    extra = sorted(k for k, v in rope.items()
                   if k not in COMMON + fields and v is not None)
    if extra:
        _unsupported(who, f"rope_parameters.{extra[0]}", rope[extra[0]],
                     f"rope_type {kind!r} reads only {list(fields)}")
    out = {"rope_base": float(rope["rope_theta"])}
    factor = float(rope.get("partial_rotary_factor") or 1.0)
    if factor != 1.0:
        if not partial:
            _unsupported(who, "rope_parameters.partial_rotary_factor", factor,
                         f"{who} rotates every feature of a head (no partial rotary)")
        out["rotary_dim"] = int(head_dim * factor)
    if kind == "default":
        return out
    scaling = {"rope_type": kind}
    scaling.update({k: _number(k, rope[k]) for k in fields if rope.get(k) is not None})
    if kind == "yarn" and "factor" not in scaling:  # transformers: max_pos / original
        scaling["factor"] = c.max_position_embeddings / scaling["original_max_position_embeddings"]
    if kind in ("dynamic", "longrope"):  # their L0, or the factor's numerator
        scaling["max_position_embeddings"] = int(c.max_position_embeddings)
    out["rope_scaling"] = scaling
    return out


def to_hf(who: str, attributes: dict, head_dim: int, partial: bool,
          rules=ROPE_TYPES) -> tuple[dict, dict]:
    """(rope_parameters, other config fields) for the spec attributes rope_base,
    rope_scaling and rotary_dim; refuses what the module cannot apply (ConfigError): a rule
    not in ``rules`` (Phi3Config takes longrope only), a partial rotary where not ``partial``.
    """
    base = _checks.eps(attributes.get("rope_base", 10000.0), f"{who}: rope_base")
    rope = {"rope_type": "default", "rope_theta": float(base)}
    config = {}
    r = attributes.get("rotary_dim")
    if r is not None and r != head_dim:
        if not partial:
            raise ConfigError(f"{who}: rotary_dim={r!r} (partial rotary) has no field in "
                              f"{who}'s config: it rotates every feature of a head (K = "
                              f"{head_dim})")
        if isinstance(r, bool) or not isinstance(r, int) or r < 0 or r > head_dim or r % 2:
            raise ConfigError(f"{who}: rotary_dim={r!r} must be an even integer in [0, "
                              f"{head_dim}]")
        rope["partial_rotary_factor"] = r / head_dim
    scaling = attributes.get("rope_scaling")
    if scaling is None:
        return rope, config
    if not isinstance(scaling, dict):
        raise ConfigError(f"{who}: rope_scaling must be a dict of rope_parameters or None, got "
                          f"{scaling!r}")
    scaling = dict(scaling)
    kind = scaling.pop("rope_type", "default")
    if kind not in rules:
        raise ConfigError(f"{who}: rope_scaling.rope_type={kind!r} is not one of "
                          f"{list(rules)} ({who}'s config takes no other)")
    max_pos = scaling.pop("max_position_embeddings", None)
    if max_pos is not None:
        config["max_position_embeddings"] = int(max_pos)
    elif kind == "dynamic":
        raise ConfigError(f"{who}: rope_scaling dynamic needs max_position_embeddings (L0)")
    for k in scaling:
        if k not in FIELDS[kind]:
            raise ConfigError(f"{who}: rope_scaling.{k} has no rope_parameters field for "
                              f"rope_type {kind!r} (transformers derives seq_len from the "
                              f"positions)" if k == "seq_len" else
                              f"{who}: rope_scaling.{k} is not read by rope_type {kind!r}")
    rope.update({"rope_type": kind, **scaling})
    if kind == "longrope" and "original_max_position_embeddings" in scaling:
        # Phi3Config copies its own original_max_position_embeddings into rope_parameters
        config["original_max_position_embeddings"] = int(
            scaling["original_max_position_embeddings"])
    if kind == "yarn" and "max_position_embeddings" not in config and "factor" in scaling and \
            "original_max_position_embeddings" in scaling:
        # the context YaRN extends to (only read where factor is not given; set so that
        # transformers does not warn that the two disagree)
        config["max_position_embeddings"] = int(scaling["factor"] *
                                                scaling["original_max_position_embeddings"])
    return rope, config


def _number(key: str, v):
    """A rope_parameters value as the spec's scaling holds it."""
    if key in ("short_factor", "long_factor"):
        return [float(f) for f in v]
    if key == "truncate":
        return bool(v)
    if key == "original_max_position_embeddings":
        return int(v)
    return float(v)


def _unsupported(who: str, field: str, value, why: str):
    raise ConfigError(f"{who}: {field}={value!r} is not expressible in the spec ({why})")
