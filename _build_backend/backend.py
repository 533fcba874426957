"""setuptools' PEP 517 backend, without one trap: setuptools copies package data into ./build/lib and never
removes what a later checkout deleted, so a wheel built in a tree that built one before carries files that are
no longer in the tree. For this package that means a retired patch, installed into SGLang and served by the
plugin. Every wheel starts from an empty build/lib."""

import shutil
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook unchanged)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    shutil.rmtree(Path("build") / "lib", ignore_errors=True)
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
