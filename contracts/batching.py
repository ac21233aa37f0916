"""Batching shared by the model plugins: the batch size "auto" picks, and the batch-size setting.

A batch that does not fit on the GPU is halved and retried: contracts.torch.memory.run_with_backoff (it needs torch).
"""
from __future__ import annotations

AUTO = "auto"
DEFAULT_BATCH = 8


def auto_batch_size(table: dict[str, tuple[tuple[float, int], ...]], dtype: str, device_bytes: int | None) -> int:
    """The batch of `table[dtype]`'s row with the most memory the device has (rows: (GB, batch), GB = 10⁹ bytes
    of the device's total memory, so a card sold as 24 GB, 25.7·10⁹ bytes, takes the 24 row). A device smaller
    than every row, or none (CPU: device_bytes None), takes the first row; an empty table, DEFAULT_BATCH."""
    rows = table.get(dtype) or table.get("fp32") or ()
    if not rows:
        return DEFAULT_BATCH
    fitting = [batch for gb, batch in rows if device_bytes is not None and device_bytes >= gb * 1e9]
    return fitting[-1] if fitting else rows[0][1]


def batch_setting(value, where: str) -> int | str:
    """A batch-size setting: a whole number of at least 1, or "auto"; anything else is an error naming `where`."""
    if value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, str) and value.isdigit()):
        raise ValueError(f"{where}: batch size must be a whole number or \"auto\", not {value!r}")
    if int(value) < 1:
        raise ValueError(f"{where}: batch size must be at least 1, not {value!r}")
    return int(value)
