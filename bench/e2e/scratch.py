"""Scratch folders for the benchmark scripts' generated models and .tess files.

A VGG-16 or GPT-2 comparison writes about 1 GB of them; left behind after every run they
filled the disk of the machine CI shares (session 9: 64 GB in /tmp).
"""
import atexit
import shutil
import tempfile


def work_dir(prefix: str) -> str:
    """A new temporary folder, removed with everything in it when the script exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
