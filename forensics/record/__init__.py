"""``forensics record``: a flight recorder that keeps the minutes before the crash.

A small long-running process samples host memory, cgroup memory, /dev/shm, each GPU's memory and
compute processes, and the RSS of SGLang/vLLM processes into a bounded ring of compressed segments
(:mod:`.ring`); ``collect`` bundles the last hour and ``report`` reads the segments like any other
artifact (``parsers/record.py``). See docs/record.md.
"""

from __future__ import annotations

from .recorder import Recorder, RecordOptions, lower_oom_score, run
from .ring import DEFAULT_DIR, RingStatus, RingWriter, read_records, ring_status
from .status import status_text

__all__ = ["DEFAULT_DIR", "RecordOptions", "Recorder", "RingStatus", "RingWriter", "lower_oom_score", "read_records",
           "ring_status", "run", "status_text"]
