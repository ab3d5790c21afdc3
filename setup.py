"""Builds the compiled modules (online/fastparse.pyx, online/kernels.pyx and
streams/partitioner.pyx); the rest of the project is described in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                module,
                [module.replace(".", "/") + ".pyx"],
                include_dirs=["online/vendor/xxhash"],
                extra_compile_args=["-O3"],
            )
            for module in ("online.fastparse", "online.kernels", "streams.partitioner")
        ],
        compiler_directives={"language_level": "3"},
    )
)
