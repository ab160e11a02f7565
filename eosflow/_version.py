"""eosflow's version: the one place it is written. ``pyproject.toml`` reads it from here
(setuptools' ``attr:``), ``eosflow --version`` prints it, and CHANGELOG.md's newest
release must name it (``tests/release/test_version.py``)."""

__version__ = "0.1.0"
