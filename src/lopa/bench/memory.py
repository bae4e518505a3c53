"""Peak resident memory of this process during one generation.

On Linux, writing "5" to /proc/self/clear_refs resets the high-water mark (VmHWM), so each
generation gets its own peak; elsewhere we fall back to the process-lifetime peak
(getrusage), which can only grow.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

_CLEAR = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def reset_peak() -> bool:
    """Start a new peak window; False when the platform cannot (the peak is then lifetime)."""
    try:
        _CLEAR.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Highest resident set size since the last reset_peak() (or process start), in MiB."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024
