"""cross_entropy: softmax cross-entropy with an ignore index and label smoothing."""

import numpy as np

from ..oracle.losses import cross_entropy as oracle
from ._build import Component, Fn, Rng, error, gradient, value

COMPONENT = Component("cross_entropy", {
    "cross_entropy": Fn(module="losses", inputs=["logits", "targets"],
                        attributes={"ignore_index": -100, "label_smoothing": 0.0,
                                    "reduction": "mean"},
                        returns=["loss"], oracle=oracle),
})


def cases(rng):
    t = np.array([[1, 4, -100, 0], [2, -100, 3, 3]])
    yield value("cross_entropy/basic-001", "cross_entropy",
                "A (3, 5) batch of logits in [-3, 3], every target counted: the mean of "
                "-log softmax(logits)[target].",
                inputs={"logits": rng.uniform((3, 5), -3, 3), "targets": np.array([0, 4, 2])},
                flags=["basic"])
    yield value("cross_entropy/ignore-001", "cross_entropy",
                "A (2, 4) batch of tokens, two of them padding (target -100, the default "
                "ignore_index): the mean divides by the 6 counted tokens, not 8.",
                inputs={"logits": rng.uniform((2, 4, 5), -3, 3), "targets": t},
                flags=["ignore-index"])
    yield value("cross_entropy/smoothing-001", "cross_entropy",
                "label_smoothing = 0.1 (Vaswani et al. 2017): q = 0.9 onehot + 0.1 / L, the "
                "smoothing mass spread over all L classes, the target included (torch's "
                "definition); spreading it over the L - 1 others fails.",
                inputs={"logits": rng.uniform((2, 4, 5), -3, 3), "targets": t},
                attributes={"label_smoothing": 0.1}, flags=["label-smoothing", "ignore-index"])
    yield value("cross_entropy/sum-001", "cross_entropy",
                "reduction='sum' over a (5, 6) batch.",
                inputs={"logits": rng.uniform((5, 6), -3, 3),
                        "targets": np.array([5, 0, 1, 1, 4])},
                attributes={"reduction": "sum"}, flags=["reduction"])
    yield value("cross_entropy/none-001", "cross_entropy",
                "reduction='none' with ignore_index = 0: a loss per token, 0 where the "
                "target is ignored.",
                inputs={"logits": rng.uniform((2, 3, 4), -3, 3),
                        "targets": np.array([[0, 1, 3], [2, 0, 1]])},
                attributes={"reduction": "none", "ignore_index": 0}, flags=["reduction"])
    yield value("cross_entropy/large-logits-001", "cross_entropy",
                "Logits up to +-60 (exp overflows float16 at 11.1, float32 at 88.7 if taken "
                "without subtracting the max): log-sum-exp must subtract the row max.",
                inputs={"logits": np.array([[60.0, -60.0, 0.0, 59.5], [-40.0, -41.0, -60.0, -40.5]]),
                        "targets": np.array([3, 1])},
                flags=["stability", "large-logits"])
    yield value("cross_entropy/all-ignored-001", "cross_entropy",
                "Every target ignored: the mean over 0 tokens is 0/0 = NaN, as torch returns "
                "(a loss of 0 would hide an all-padding batch).",
                inputs={"logits": rng.uniform((2, 3), -3, 3), "targets": np.array([-100, -100])},
                flags=["edge", "ignore-index"])
    yield value("cross_entropy/smoothing-none-001", "cross_entropy",
                "label_smoothing = 0.2 with reduction='none', a rank-1 batch of 4 tokens.",
                inputs={"logits": rng.uniform((4, 3), -3, 3), "targets": np.array([2, 2, 0, 1])},
                attributes={"label_smoothing": 0.2, "reduction": "none"},
                flags=["label-smoothing", "reduction"])

    logits = rng.uniform((2, 4), -3, 3)
    yield error("cross_entropy/target-range-001", "cross_entropy",
                "A target of 4 with L = 4 classes (valid targets are 0..3 and the ignore "
                "index).",
                inputs={"logits": logits, "targets": np.array([1, 4])},
                error="DomainError", mentions=["targets", "4"])
    yield error("cross_entropy/target-shape-001", "cross_entropy",
                "targets of shape (3,) for logits of shape (2, 4): targets must be "
                "logits.shape[:-1].",
                inputs={"logits": logits, "targets": np.array([0, 1, 2])},
                error="ShapeError", mentions=["targets", "(3,)", "(2, 4)"])
    yield error("cross_entropy/float-targets-001", "cross_entropy",
                "Float targets (class probabilities) are refused: targets are class indices.",
                inputs={"logits": logits, "targets": np.array([1.0, 2.0])},
                error="DTypeError", mentions=["targets"])
    yield error("cross_entropy/smoothing-range-001", "cross_entropy",
                "label_smoothing = 1.5, outside [0, 1].",
                inputs={"logits": logits, "targets": np.array([0, 1])},
                attributes={"label_smoothing": 1.5}, error="ConfigError",
                mentions=["label_smoothing"])
    yield error("cross_entropy/bad-reduction-001", "cross_entropy",
                "reduction='avg': the reductions are 'mean', 'sum' and 'none'.",
                inputs={"logits": logits, "targets": np.array([0, 1])},
                attributes={"reduction": "avg"}, error="ConfigError",
                mentions=["reduction", "avg"])
    yield error("cross_entropy/scalar-001", "cross_entropy",
                "Rank-0 logits have no class axis.",
                inputs={"logits": np.array(0.5), "targets": np.array(0)},
                error="ShapeError", mentions=["logits"])
    yield from defaults_cases()
    yield from study_cases()


def defaults_cases():
    rd = Rng(f"{COMPONENT.id}/defaults")
    t = np.array([[0, 3, -100, 1], [0, -100, 4, 2]])
    logits = rd.uniform((2, 4, 5), -3, 0)
    for idx in np.ndindex(t.shape):  # the target class well ahead: a small loss
        if t[idx] >= 0:
            logits[idx + (t[idx],)] = 3.0
    yield value("cross_entropy/defaults-001", "cross_entropy",
                "ignore_index, label_smoothing and reduction left out (-100, 0.0, 'mean'): a "
                "(2, 4) batch with targets 0 and -100 among them, each target's logit 3 and "
                "the others in [-3, 0] (a small loss): ignoring class 0 instead, smoothing by "
                "0.1 (which adds ~0.1 x 4 to a loss of ~0.05), or summing, changes the loss.",
                inputs={"logits": logits, "targets": t},
                flags=["defaults", "ignore-index"], omit_defaults=True)


def grad_cases(r):
    t = np.array([[1, 4, -100, 0], [2, -100, 3, 3]])
    yield gradient("cross_entropy/grad-001", "cross_entropy",
                   "reduction='mean' over the 6 counted tokens of a (2, 4) batch with two "
                   "ignored (-100): dlogits = (p - onehot) / 6, 0 on ignored tokens (dividing "
                   "by 8, all tokens, fails).",
                   inputs={"logits": r.uniform((2, 4, 5), -3, 3), "targets": t},
                   cotangents={"loss": np.array(1.0)}, flags=["gradient", "ignore-index"])
    yield gradient("cross_entropy/grad-002", "cross_entropy",
                   "label_smoothing = 0.1 (Vaswani et al.): dlogits = (p - q) / N with "
                   "q = 0.9 onehot + 0.1 / L, and a cotangent of 0.75 on the loss.",
                   inputs={"logits": r.uniform((2, 4, 5), -3, 3), "targets": t},
                   attributes={"label_smoothing": 0.1}, cotangents={"loss": np.array(0.75)},
                   flags=["gradient", "label-smoothing", "ignore-index"])
    yield gradient("cross_entropy/grad-003", "cross_entropy",
                   "reduction='none' with a cotangent per token, ignore_index = 0 given: "
                   "the tokens whose target is 0 get a zero gradient.",
                   inputs={"logits": r.uniform((3, 4), -3, 3), "targets": np.array([2, 0, 3])},
                   attributes={"reduction": "none", "ignore_index": 0, "label_smoothing": 0.2},
                   cotangents={"loss": r.uniform((3,))}, flags=["gradient", "reduction"])
    yield gradient("cross_entropy/grad-004", "cross_entropy",
                   "reduction='sum' over a (5, 6) batch, logits in [-8, 8]: the cotangent is "
                   "not divided by the token count.",
                   inputs={"logits": r.uniform((5, 6), -8, 8, 2.0**-4),
                           "targets": np.array([5, 0, 1, 1, 4])},
                   attributes={"reduction": "sum"}, cotangents={"loss": np.array(-0.5)},
                   flags=["gradient", "reduction"])
    yield from grad_study_cases(Rng(f"{COMPONENT.id}/grad-study"))


# -- asked for by the mutation study (issue 19) --------------------------------------------

def study_cases():
    Rng(f"{COMPONENT.id}/study")  # no random inputs
    yield value("cross_entropy/overflow-001", "cross_entropy",
                "Logits beyond float32's exp range (exp overflows above 88.7): rows [96, -96, 90, "
                "0], [-100, -92, -90, -89] and [89.5, 91, -94, 92], reduction='none'. A "
                "log-sum-exp without the max subtracted gives inf or nan; with it, every loss "
                "is finite (e.g. row 1: 96 - 90 + log(1 + e^-6 + ...)).",
                inputs={"logits": np.array([[96.0, -96.0, 90.0, 0.0], [-100.0, -92.0, -90.0, -89.0],
                                            [89.5, 91.0, -94.0, 92.0]]),
                        "targets": np.array([2, 1, 0])},
                attributes={"reduction": "none"}, flags=["large-logits", "overflow"])
    yield value("cross_entropy/overflow-002", "cross_entropy",
                "Logits beyond float64's exp range (exp overflows above 709.8): rows [720, -720, "
                "712, 0] and [-736, -712, -720, -704], reduction='none': finite losses (8 + "
                "log(1 + e^-8 + ...) for row 0) in every dtype, not inf or nan.",
                inputs={"logits": np.array([[720.0, -720.0, 712.0, 0.0],
                                            [-736.0, -712.0, -720.0, -704.0]]),
                        "targets": np.array([2, 1])},
                attributes={"reduction": "none"}, flags=["large-logits", "overflow"])


def grad_study_cases(r):
    t = np.array([[0, 3, -100], [4, -100, 1]])
    yield gradient("cross_entropy/grad-005", "cross_entropy",
                   "ignore_index, label_smoothing and reduction left out (-100, 0.0, 'mean'): "
                   "dlogits = (p - onehot) / 4 over the 4 counted tokens of a (2, 3) batch.",
                   inputs={"logits": r.uniform((2, 3, 5), -3, 3), "targets": t},
                   cotangents={"loss": np.array(1.0)}, flags=["gradient", "defaults"],
                   omit_defaults=True)
