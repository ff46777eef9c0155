"""attnspec.spec: the normative part (documents, golden vectors, the oracle).

Importing this package is cheap: it imports neither mpmath nor any framework.
"""

SPEC_VERSION = "1.4.0"
__version__ = SPEC_VERSION
