"""The wheel carries libsplitzip.so (built by `make capi`), so it is tagged
for this platform rather than as pure Python; everything else is in
pyproject.toml."""

from setuptools import setup
from wheel.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: any Python 3, no Python ABI, this machine's
    platform (the shared library is a Linux ELF of this architecture)."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(cmdclass={"bdist_wheel": PlatformWheel})
