"""The oracle: the spec's equations evaluated in arbitrary precision (mpmath).

Written straight from the equations with loops over indices, for clarity, not
speed. It exists only to produce expected values for the vector files; no
backend imports it (the NumPy backend in particular, or the suite would compare
the oracle with itself).
"""
