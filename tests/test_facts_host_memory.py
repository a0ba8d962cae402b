"""One host's memory facts, shared by every finding about host memory (forensics.facts.host_memory)."""

from __future__ import annotations

from test_detectors_common import GIB, timeline

from forensics.facts.host_memory import ASSUMED_BASELINE_FRACTION, host_memory


def _host(total, used, avail, line, file="session.txt"):
    return {"kind": "host_memory", "source": "free", "file": file, "line": line, "total_bytes": total * GIB,
            "used_bytes": used * GIB, "avail_bytes": avail * GIB}


def _launch(line, file="session.txt"):
    return {"kind": "command", "source": "transcript", "file": file, "line": line,
            "text": "python3 -m sglang.launch_server --tp 8", "attrs": {"command": "python3 -m sglang.launch_server --tp 8"}}


def test_baseline_is_what_was_not_available_before_the_launch():
    mem = host_memory(timeline(_host(449, 40, 408, 1), _launch(3), _host(448, 318, 130, 12)))
    assert mem.total == 449 * GIB  # the largest total any snapshot showed
    base = mem.baseline()
    assert base.observed and base.used == 41 * GIB and base.row["line"] == 1


def test_without_a_snapshot_before_the_launch_the_baseline_is_assumed_and_says_so():
    mem = host_memory(timeline(_launch(1), _host(400, 300, 100, 5)))
    base = mem.baseline()
    assert not base.observed and base.used == int(400 * GIB * ASSUMED_BASELINE_FRACTION) and "assumed" in base.how


def test_a_container_limit_caps_the_capacity_and_what_was_usable():
    limit = {"kind": "launch_command", "source": "launch", "file": "run.sh", "line": 1,
             "text": "docker run --memory 200g img python3 -m sglang.launch_server",
             "attrs": {"flags": {}, "docker_memory_bytes": 200 * GIB}}
    mem = host_memory(timeline(_host(449, 40, 408, 1), _launch(3), limit))
    assert mem.capacity == 200 * GIB and mem.baseline().used == 0  # 408 GiB available > the 200 GiB limit
