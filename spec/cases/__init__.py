"""Case definitions: one module per component, turned into vector files by
:mod:`attnspec.spec.generate`. Each module defines ``COMPONENT`` (a
:class:`~attnspec.spec.cases._build.Component`) and ``cases(rng)`` yielding
:func:`value` and :func:`error` cases with hand-written, never reused ids; a
differentiable component also defines ``grad_cases(rng)`` yielding its
:func:`gradient` cases, drawn from their own stream ``Rng("<component>/grad")``.
"""
