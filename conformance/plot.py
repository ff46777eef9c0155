"""``attnspec show ID --plot out.png``: what a learner wants to see of a vector.

- attention weights (any output or intermediate named ``weights``/``*.weights``)
  as heatmaps, one per head, with the values in the cells and token labels;
- positional encodings as a heatmap over (position, feature);
- otherwise the inputs and expected outputs, each drawn as a matrix.

matplotlib is the optional extra ``plot`` and is imported only here.
"""

from __future__ import annotations

import os

import numpy as np
from attnspec.spec.errors import ConfigError

MAX_PANELS = 12
FORMATS = ("png", "pdf", "svg", "jpg", "jpeg")  # what --plot writes, by the file's extension


def check_plot_path(path: str, force: bool = False) -> None:
    """Refuse, before anything is drawn, a ``--plot`` file with an extension not in
    :data:`FORMATS`, or one that exists (unless ``force``)."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        what = f"a .{ext} file" if ext else "a file without an extension"
        raise ConfigError(f"--plot {path}: cannot write {what}; supported: "
                          f"{', '.join('.' + f for f in FORMATS)}")
    if os.path.exists(path) and not force:
        raise ConfigError(f"--plot {path} exists; pass --force to replace it")


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'attnspec[plot]'") from None
    return plt


def _labels(v, n: int, axis: str) -> list[str]:
    """Token labels: the ids when the vector has them, else q0.. / k0.."""
    for name in (("tgt_ids", "prompt", "ids") if axis == "q" else ("src_ids", "ids")):
        ids = v.inputs.get(name)
        if ids is not None and ids.ndim >= 1 and ids.shape[-1] == n:
            row = ids.reshape(-1, ids.shape[-1])[0]
            return [f"{axis}{i}:{int(t)}" for i, t in enumerate(row)]
    return [f"{axis}{i}" for i in range(n)]


def panels(v) -> list[tuple[str, np.ndarray, list[str] | None, list[str] | None]]:
    """(title, 2-D matrix, row labels, column labels) for each heatmap to draw."""
    out = []
    weights = {**{k: a for k, a in v.outputs.items() if k == "weights"},
               **{k: a for k, a in v.intermediates.items() if k.endswith("weights")}}
    for name, w in weights.items():
        mats = w.reshape(-1, w.shape[-2], w.shape[-1]) if w.ndim >= 2 else w.reshape(1, 1, -1)
        lead = list(np.ndindex(w.shape[:-2])) if w.ndim > 2 else [()]
        for idx, m in zip(lead, mats):
            if w.ndim == 4:  # (B, H, T, S): say which batch row and which head
                where, head = f" batch {idx[0]}", f" head {idx[1]}"
            else:
                where, head = ("" if not idx else f" [{','.join(map(str, idx))}]"), ""
            out.append((f"{name}{where}{head}", m, _labels(v, m.shape[0], "q"),
                        _labels(v, m.shape[1], "k")))
    if not out and "pe" in v.outputs:
        out.append(("positional encoding (position × feature)", v.outputs["pe"], None, None))
    if not out:
        for group, tensors in (("input", v.inputs), ("expected", v.outputs)):
            for name, a in tensors.items():
                a = a.astype(np.float64)
                m = a.reshape(-1, a.shape[-1]) if a.ndim >= 1 else a.reshape(1, 1)
                out.append((f"{group} {name} {tuple(a.shape)}", m, None, None))
    return out[:MAX_PANELS]


def plot_vector(v, path: str) -> None:
    plt = _pyplot()
    items = panels(v)
    if not items:
        raise ConfigError(f"{v.id} has nothing to draw")
    cols = min(4, len(items))
    rows = (len(items) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    for ax, (title, m, ylab, xlab) in zip(axes.ravel(), items):
        _heatmap(ax, m, title, ylab, xlab)
    for ax in axes.ravel()[len(items):]:
        ax.axis("off")
    fig.suptitle(f"{v.id}: {v.description[:110]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=os.path.splitext(path)[1].lower().lstrip("."))
    plt.close(fig)


def _heatmap(ax, m, title, ylab, xlab) -> None:
    finite = np.where(np.isfinite(m), m, 0.0)
    im = ax.imshow(finite, cmap="viridis", aspect="auto")
    ax.set_title(title, fontsize=8)
    if m.size <= 100:
        for (i, j), val in np.ndenumerate(m):
            ax.text(j, i, f"{val:.2f}", ha="center", va="center", fontsize=6,
                    color="white" if finite[i, j] < finite.mean() else "black")
    if ylab:
        ax.set_yticks(range(len(ylab)), ylab, fontsize=6)
    if xlab:
        ax.set_xticks(range(len(xlab)), xlab, fontsize=6, rotation=45)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
