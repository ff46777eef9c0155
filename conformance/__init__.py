"""attnspec.conformance: the pytest plugin, the suite and the command line."""
