"""Making things durable on the lower filesystem: the project's one way (strongroom.durable)."""

from __future__ import annotations

from strongroom.durable import fsync_dir, replace_file, write_synced

__all__ = ["fsync_dir", "replace_file", "write_synced"]
