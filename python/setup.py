"""The wheel carries libsplitzip.so (built by `make capi`), so it is tagged
for this platform rather than as pure Python; everything else is in
pyproject.toml."""

import os

from setuptools import setup
from wheel.bdist_wheel import bdist_wheel

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "splitzip", "libsplitzip.so")


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: any Python 3, no Python ABI, this machine's
    platform (the shared library is a Linux ELF of this architecture).
    A wheel without the library would install and import, then fail at
    the first Cache: refused here instead."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def run(self):
        if not os.path.isfile(LIB):
            raise SystemExit(f"splitzip: {LIB} is missing: build it first with 'make capi' in the repository "
                             "root (or build the wheel with 'make wheel')")
        super().run()

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(cmdclass={"bdist_wheel": PlatformWheel})
