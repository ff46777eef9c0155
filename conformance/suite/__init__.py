"""The conformance suite. Run with ``attnspec verify`` or
``pytest --pyargs attnspec.conformance.suite --backend NAME``."""
