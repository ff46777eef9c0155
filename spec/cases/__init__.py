"""Case definitions: one module per component, turned into vector files by
:mod:`attnspec.spec.generate`. Each module defines ``COMPONENT`` (a
:class:`~attnspec.spec.cases._build.Component`) and ``cases(rng)`` yielding
:func:`value` and :func:`error` cases with hand-written, never reused ids.
"""
