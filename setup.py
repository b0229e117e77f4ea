"""Build step for the one compiled module; everything else is in pyproject.toml.

`tfobs.xspace._wire` (C, the plain Python API, no numpy headers) speeds up reading a
capture's events several times. It is optional: where no C compiler is at hand the
install still succeeds and tfobs reads captures with numpy alone (same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tfobs.xspace._wire", ["tfobs/xspace/_wire.c"], optional=True)])
