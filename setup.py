"""Builds the compiled modules (online/fastparse.pyx, online/kernels.pyx); the rest of the
project is described in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                f"online.{name}",
                [f"online/{name}.pyx"],
                include_dirs=["online/vendor/xxhash"],
                extra_compile_args=["-O3"],
            )
            for name in ("fastparse", "kernels")
        ],
        compiler_directives={"language_level": "3"},
    )
)
