"""The conformance suite. Run with ``attnspec verify`` or
``pytest --pyargs attnspec.conformance.suite --attnspec-backend NAME`` (options:
:mod:`attnspec.conformance.plugin`)."""
