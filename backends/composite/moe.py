"""The mixture-of-experts layer (spec/components/moe.md), written once over each backend's
moe_router and gated_feedforward: Mixtral, Qwen2-MoE (a sigmoid-gated shared expert),
DeepSeek-V3 (an ungated shared expert, sigmoid group-limited routing), DeepSeek-V2 (softmax,
groups scored by their largest score: group_score "max")."""

from __future__ import annotations

from attnspec.spec.errors import ParameterError

from .. import _checks as check
from . import Composite

GLU = ("w_gate", "w_up", "w_down")


class MoE(Composite):
    EXPORTS = ("moe",)

    def moe(self, x, *, top_k, scoring="softmax", renormalize=False, eps=1e-20, n_group=1,
            topk_group=1, routed_scaling_factor=1.0, group_score="sum_top2", params):
        """z = x W_router; w, I = moe_router(z); y = sum_j w_j FFN_{I_j}(x) (+ the shared
        expert, times sigma(x W_shared_gate) when that gate is given)."""
        ops = self.ops
        x = ops.floating("x", x)
        n, d = check.rank("x", x, min_rank=2, max_rank=2)                   # (N, D)
        p = check.params_of(params)
        w_router = self._param(p, "router.w", (d, None), x)                 # (D, E)
        e = check.shape(w_router)[1]
        bias = p.get("router.correction_bias", (e,))
        bias = None if bias is None else ops.floating(p.path("router.correction_bias"), bias,
                                                      like=x)
        experts = self._experts(p.scope("experts"), e, d, x)
        z = ops.matmul(x, w_router)                                         # (N, E)
        w, idx = self.k.moe_router(z, bias, top_k=top_k, scoring=scoring,
                                   renormalize=renormalize, eps=eps, n_group=n_group,
                                   topk_group=topk_group,
                                   routed_scaling_factor=routed_scaling_factor,
                                   **({} if group_score == "sum_top2" else
                                      {"group_score": group_score}))  # (N, k)
        outs = ops.stack([self.k.gated_feedforward(x, params={g: experts[g][i] for g in GLU})
                          for i in range(e)], axis=1)                       # (N, E, D)
        y = None
        for j in range(check.shape(idx)[1]):
            term = w[:, j:j + 1] * ops.take_rows(outs, idx[:, j])           # (N, D)
            y = term if y is None else y + term
        shared = self._shared(p, d, x)
        return (y if shared is None else y + shared), z

    def _param(self, p, name, expected, x):
        return self.ops.floating(p.path(name), p.require(name, expected), like=x)

    def _experts(self, p, e: int, d: int, x) -> dict:
        """experts.w_gate, w_up (E, D, F) and w_down (E, F, D); w_gate fixes F."""
        w_gate = self._param(p, "w_gate", (e, d, None), x)
        f = check.shape(w_gate)[2]
        return {"w_gate": w_gate, "w_up": self._param(p, "w_up", (e, d, f), x),
                "w_down": self._param(p, "w_down", (e, f, d), x)}

    def _shared(self, p, d: int, x):
        """FFN_shared(x), times sigma(x W_shared_gate) = (1 + tanh(x W_shared_gate / 2)) / 2
        when shared_gate.w is given; None without a shared expert."""
        if "shared.w_gate" not in p:
            if "shared_gate.w" in p:
                raise ParameterError(f"parameter {p.path('shared_gate.w')!r} is given but the "
                                     f"shared expert it gates is not: missing "
                                     f"{p.path('shared.w_gate')!r}")
            return None
        s = self.k.gated_feedforward(x, params=p.scope("shared"))          # (N, D)
        if "shared_gate.w" not in p:
            return s
        g = self.ops.matmul(x, self._param(p, "shared_gate.w", (d, 1), x))  # (N, 1)
        return s * (0.5 + 0.5 * self.ops.tanh(0.5 * g))
