"""The caps on what one input may expand to and when a file is streamed rather than read whole.

Read by attribute (``limits.STREAM_BYTES``) at call time everywhere, so that a test (or a caller) may
lower one for a run: a name imported by value would keep the old number."""

from __future__ import annotations

#: Caps on what one input may expand to. A 2 GB rank log must pass; a zip bomb must not.
MAX_MEMBER_BYTES = 8 << 30


MAX_TOTAL_BYTES = 32 << 30


#: Decompressed/compressed ratio above which a large archive is treated as a bomb.
MAX_RATIO = 200


RATIO_CHECK_AFTER = 256 << 20


#: Regular files above this size are streamed in chunks instead of read whole. Measured (bench/run.py's rank
#: log, `forensics report`, 2 cores): read whole, a 16 MiB SGLang log peaks at 440 MB RSS, 32 MiB at 715 MB,
#: 62 MiB at 1.2 GB; streamed, each peaks near 300 MB and runs faster: the budget is 512 MB.
STREAM_BYTES = 16 << 20


#: When all inputs together pass STREAM_BYTES, files above this size are streamed too: eight 32 MiB
#: rank logs are as big an input as one 256 MiB log and must not be held whole either.
STREAM_BYTES_BIG_INPUT = 1 << 20


#: Files one input may hold, all its folders and archives together (nested ones included): a host's
#: bundle holds tens; each file costs milliseconds to sort and parse, so 200,000 tiny members in a
#: 3 MB .tar.gz would run for many minutes and write a report of 100+ MB.
MAX_FILES = 10_000


#: Lines longer than this are cut here (the rest of the line is dropped and the cut counted): a
#: request body logged whole must not take the parse, or memory, with it.
MAX_LINE_BYTES = 1 << 20
