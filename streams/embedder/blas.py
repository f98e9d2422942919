"""How many threads OpenBLAS may use while a block runs: numpy gives no handle on it, so ctypes does."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache


@cache
def openblas_threads() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """numpy's OpenBLAS thread-count setter and getter, found among the loaded libraries (Linux only)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas", "openblas"):  # numpy 2 wheels prefix and suffix the symbols
            for suffix in ("64_", ""):
                setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype = [ctypes.c_int], None
                    getter.argtypes, getter.restype = [], ctypes.c_int
                    return setter, getter
    return None


_blas_lock = threading.Lock()
_blas_depth = 0
_blas_saved = 0


@contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Run the block with OpenBLAS on ``n`` threads, then put back what was there (nesting-safe).

    OpenBLAS's count is process-wide, hence the depth counter: the first caller in saves, the last out
    restores. With n=None, or a BLAS other than OpenBLAS, this does nothing.
    """
    global _blas_depth, _blas_saved
    api = openblas_threads() if n is not None else None
    if api is None:
        yield
        return
    setter, getter = api
    with _blas_lock:
        if _blas_depth == 0:
            _blas_saved = getter()
            setter(n)
        _blas_depth += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_depth -= 1
            if _blas_depth == 0:
                setter(_blas_saved)
