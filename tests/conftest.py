"""The project's own tests. A framework's tests skip where the framework is not installed
(each tox environment installs its own), but an environment that promises frameworks lists
them in ATTNSPEC_REQUIRE (comma-separated modules, set in tox.ini): there a missing one is
an error before any test runs, never a silent skip."""

import importlib
import os

for _name in filter(None, (n.strip() for n in os.environ.get("ATTNSPEC_REQUIRE", "").split(","))):
    importlib.import_module(_name)
