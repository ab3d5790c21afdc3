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
                # No fused multiply-adds unless written: a similarity or a mean is then the
                # same number on every machine (GCC contracts a * b + c where the target has
                # FMA, as aarch64 always does).
                extra_compile_args=["-O3", "-ffp-contract=off"],
            )
            for module in ("online.fastparse", "online.kernels", "streams.partitioner")
        ],
        compiler_directives={"language_level": "3"},
    )
)
