"""The one thing pyproject.toml does not say: eosflow._native's compiled hot paths.

Optional, so an install without a C compiler still works, on the same steps in Python
(``eosflow._native.COMPILED`` says which). Cython comes with the build (pyproject.toml's
build-system).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"eosflow._native.{name}",
            [f"eosflow/_native/{name}.pyx"],
            depends=["eosflow/_native/_slots.pxd"],  # cimported by each: in the sdist too
            optional=True,
        )
        for name in ("_hot", "_stores", "_drive")
    ]
)
