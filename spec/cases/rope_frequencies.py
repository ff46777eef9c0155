"""rope_frequencies: RoPE inverse frequencies and attention factor under transformers' rope_type
rules (default, linear, dynamic, yarn, llama3, longrope), from configuration numbers alone."""

from ..oracle.rope_frequencies import rope_frequencies as oracle
from ._build import Component, Fn, error, value

# The outputs are float64 configuration numbers whatever the dtype under test (as alibi_bias),
# so every dtype is judged near float64; rtol 1e-6 leaves room for a backend that stores them in
# float32 (MLX), and no low-precision atol hides a relative error in the small theta_i.
TIGHT = {"float64": {"rtol": 1e-10, "atol": 1e-12}, "float32": {"rtol": 1e-6, "atol": 1e-9},
         "float16": {"rtol": 1e-2, "atol": 2e-3}, "bfloat16": {"rtol": 4e-2, "atol": 1e-2}}  # unused

COMPONENT = Component("rope_frequencies", {
    "rope_frequencies": Fn(
        module="positional", inputs=[], required=["head_dim"], returns=["inv_freq", "attention_factor"],
        attributes={"base": 10000.0, "rope_type": "default", "seq_len": None, "factor": None,
                    "original_max_position_embeddings": None, "max_position_embeddings": None,
                    "beta_fast": 32.0, "beta_slow": 1.0, "mscale": None, "mscale_all_dim": None,
                    "attention_factor": None, "low_freq_factor": None, "high_freq_factor": None,
                    "short_factor": None, "long_factor": None, "truncate": True},
        oracle=oracle),
}, tolerances=TIGHT)

K, L0 = 16, 64
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
SHORT = [1.0 + i / 8 for i in range(K // 2)]
LONG = [2.0 + i for i in range(K // 2)]


# Configuration numbers, float64 whatever the model's dtype: judged at float64 and float32 (a
# backend that stores them in float32, MLX); a float16 or bfloat16 run has nothing to judge.
DTYPES = ["float64", "float32"]
NOTE = ("float64 configuration numbers whatever the dtype under test: judged at float64 and "
        "float32 only")


def freq(id, description, flags, **attributes):
    return value(f"rope_frequencies/{id}", "rope_frequencies", description, inputs={},
                 attributes={"head_dim": K, **attributes}, flags=["rope-scaling", *flags],
                 dtypes=DTYPES, dtype_note=NOTE)


def cases(rng):
    yield freq("default-001", "K = 16, base 10000: theta_i = 10000^(-2i/16), attention factor 1.",
               ["basic"])
    yield freq("linear-001", "linear, factor 4 (position interpolation): theta_i / 4; dividing "
               "the positions as well (theta_i / 16 in effect) is rope's bug, not this one.",
               ["basic"], rope_type="linear", factor=4.0)
    yield freq("dynamic-001", "dynamic (NTK), factor 2, L0 = max_position_embeddings = 64, seq_len "
               "200: base' = 10000 (2 * 200 / 64 - 1)^(16/14); the exponent K/(K-1) or "
               "original_max_position_embeddings as L0 fails.",
               ["basic"], rope_type="dynamic", factor=2.0, max_position_embeddings=L0, seq_len=200)
    yield freq("dynamic-002", "dynamic, factor 4, seq_len 30 <= L0 = 64: L = max(seq_len, L0) = L0, so "
               "the default frequencies at any factor.",
               ["edge"], rope_type="dynamic", factor=4.0, max_position_embeddings=L0, seq_len=30)
    yield freq("yarn-001", "yarn, factor 8, L0 64, beta_fast 32, beta_slow 1: the ramp runs over "
               "pairs lo = 0 .. hi = 3 (gamma 1, 2/3, 1/3, 0), attention factor 0.1 ln 8 + 1; "
               "dropping the attention factor or reversing the ramp fails.",
               ["attention-factor"], rope_type="yarn", factor=8.0,
               original_max_position_embeddings=L0, beta_fast=32.0, beta_slow=1.0)
    yield freq("yarn-002", "yarn, factor 8, beta_fast 4, beta_slow 0.5, mscale 1, mscale_all_dim 0.5: "
               "attention factor (0.1 ln 8 + 1) / (0.05 ln 8 + 1) (DeepSeek's spelling).",
               ["attention-factor"], rope_type="yarn", factor=8.0, original_max_position_embeddings=L0,
               beta_fast=4.0, beta_slow=0.5, mscale=1.0, mscale_all_dim=0.5)
    yield freq("yarn-003", "yarn, factor 4, truncate False: the ramp's ends d(beta_fast), d(beta_slow) "
               "are not rounded to integers (gpt-oss); floor/ceil fails.",
               ["edge"], rope_type="yarn", factor=4.0, original_max_position_embeddings=L0,
               truncate=False)
    yield freq("llama3-001", "llama3, factor 8, low 1, high 4, L0 64: wavelengths 2 pi 10000^(2i/16) = "
               "6.3 (< L0/4 = 16: kept), 19.9 and 62.8 (the band: (1 - s) theta/8 + s theta, "
               "s = (L0/w - 1)/3), >= 199 (> L0: theta/8); swapping the band edges fails.",
               ["basic"], original_max_position_embeddings=L0, **LLAMA3)
    yield freq("llama3-002", "llama3 with Llama 3.1's rope_parameters (factor 8, low 1, high 4, "
               "L0 8192, base 500000), K = 32: pairs 0..7 kept, pair 8 (w = 2 pi 500000^(1/2) "
               "= 4443) in the band between the edges L0/4 = 2048 and L0 = 8192, 9..15 divided by 8.",
               ["edge"], head_dim=32, base=500000.0, original_max_position_embeddings=8192, **LLAMA3)
    yield freq("longrope-001", "longrope, seq_len 100 > L0 = 64: theta_i / long_factor_i; attention "
               "factor sqrt(1 + ln 4 / ln 64) from max_position_embeddings / L0 = 256 / 64.",
               ["attention-factor"], rope_type="longrope", original_max_position_embeddings=L0,
               max_position_embeddings=4 * L0, seq_len=100, short_factor=SHORT, long_factor=LONG)
    yield freq("longrope-002", "longrope, seq_len 40 <= L0 = 64: the short factors; factor 2 given, "
               "so attention factor sqrt(1 + ln 2 / ln 64).",
               ["edge", "attention-factor"], rope_type="longrope", original_max_position_embeddings=L0,
               seq_len=40, factor=2.0, short_factor=SHORT, long_factor=LONG)
    yield value("rope_frequencies/defaults-001", "rope_frequencies",
                "Only head_dim = 12 given: base 10000, rope_type default (theta_i = 10000^(-i/6)), "
                "attention factor 1; a default base of 500000 or 10000 fails.",
                inputs={}, attributes={"head_dim": 12}, flags=["defaults"], omit_defaults=True,
                dtypes=DTYPES, dtype_note=NOTE)
    yield error("rope_frequencies/rope-type-001", "rope_frequencies",
                "rope_type = 'ntk' is not one of transformers' rope types.", inputs={},
                attributes={"head_dim": 8, "rope_type": "ntk"}, error="ConfigError",
                mentions=["rope_type", "ntk"])
    yield error("rope_frequencies/odd-head-dim-001", "rope_frequencies",
                "head_dim = 7 is odd: features cannot be paired.", inputs={},
                attributes={"head_dim": 7}, error="ConfigError", mentions=["head_dim", "7"])
    yield error("rope_frequencies/llama3-band-001", "rope_frequencies",
                "llama3 with high_freq_factor 1 <= low_freq_factor 4: the band would be empty.",
                inputs={}, attributes={"head_dim": 8, "original_max_position_embeddings": L0,
                                       **LLAMA3, "low_freq_factor": 4.0, "high_freq_factor": 1.0},
                error="ConfigError", mentions=["high_freq_factor", "low_freq_factor"])
    yield error("rope_frequencies/missing-l0-001", "rope_frequencies",
                "yarn without original_max_position_embeddings.", inputs={},
                attributes={"head_dim": 8, "rope_type": "yarn", "factor": 8.0},
                error="ConfigError", mentions=["original_max_position_embeddings"])
    yield error("rope_frequencies/longrope-length-001", "rope_frequencies",
                "longrope with 3 short factors for K/2 = 4 pairs.", inputs={},
                attributes={"head_dim": 8, "rope_type": "longrope", "original_max_position_embeddings": L0,
                            "seq_len": 10, "short_factor": [1.0, 1.0, 1.0],
                            "long_factor": [1.0, 1.0, 1.0, 1.0]},
                error="ConfigError", mentions=["short_factor", "4"])
    yield error("rope_frequencies/factor-001", "rope_frequencies",
                "linear with factor 0.", inputs={},
                attributes={"head_dim": 8, "rope_type": "linear", "factor": 0.0},
                error="ConfigError", mentions=["factor"])
