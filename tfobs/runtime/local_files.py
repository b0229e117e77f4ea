"""The part of `tf.io.gfile` that keeping captures uses, for local folders in a job without
TensorFlow (a JAX job): the same calls, on the local file system."""

from __future__ import annotations

import glob as _glob
import os
import shutil
from typing import IO, Any


class LocalFiles:
    """`exists`, `makedirs`, `GFile`, `rename`, `remove`, `glob`, `stat`, `listdir`,
    `rmtree` as `tf.io.gfile` names them; a URL is refused with the fix."""

    @staticmethod
    def _local(path: str) -> str:
        if "://" in path:
            raise ValueError(f"keep_dir {path.split('://')[0]}:// URLs are written through "
                             "TensorFlow's file systems: install TensorFlow in this job, or "
                             "set keep_dir (TFOBS_KEEP_DIR) to a local folder")
        return path

    def exists(self, path: str) -> bool:
        return os.path.exists(self._local(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(self._local(path), exist_ok=True)

    def GFile(self, path: str, mode: str) -> IO[Any]:  # gfile's name
        return open(self._local(path), mode)

    def rename(self, src: str, dst: str, overwrite: bool = False) -> None:
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(dst)
        os.replace(self._local(src), self._local(dst))

    def remove(self, path: str) -> None:
        os.remove(self._local(path))

    def glob(self, pattern: str) -> list[str]:
        return _glob.glob(self._local(pattern))

    def stat(self, path: str) -> Any:
        class _Stat:
            length = os.path.getsize(self._local(path))

        return _Stat()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(self._local(path))

    def rmtree(self, path: str) -> None:
        shutil.rmtree(self._local(path))
