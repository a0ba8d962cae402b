"""parsers/container_limits.py: a cgroup's or a pod's memory limit, in the forms its own files and tools print."""

from __future__ import annotations

import json

from parsers import container_limits, transcript
from parsers.schema import NotThisFormat

GIB = 1 << 30


def limits(text: str, command: str | None = None) -> list[tuple[int, str]]:
    ev = container_limits.parse(text, command=command).events
    return [(r["bytes"], json.loads(r["attrs"])["limit_from"]) for r in ev.iter_rows(named=True)
            if r["kind"] == "container_memory_limit"]


def oom_kills(text: str, command: str | None = None) -> list[int]:
    ev = container_limits.parse(text, command=command).events
    return [r["count"] for r in ev.iter_rows(named=True) if r["kind"] == "failure"]


def test_the_collectors_cgroup_file_lines() -> None:
    text = ("memory.max: 214748364800\nmemory.high: max\nmemory.current: 90194313216\n"
            "memory.events:\n  low 0\n  high 0\n  max 12\n  oom 3\n  oom_kill 3\n")
    assert limits(text) == [(200 * GIB, "cgroup v2 memory.max")]
    assert container_limits.sniff(text) >= 0.8


def test_no_limit_is_no_row() -> None:
    assert limits("memory.max: max\n") == []
    assert limits("memory.limit_in_bytes: 9223372036854771712\n") == []  # v1's "unlimited"
    assert limits("memory.limit_in_bytes: 68719476736\n") == [(64 * GIB, "cgroup v1 memory.limit_in_bytes")]


def test_a_cat_of_the_file_then_its_value() -> None:
    assert limits("$ cat /sys/fs/cgroup/memory.max\n137438953472\n") == [(128 * GIB, "cgroup v2 memory.max")]
    # in a pasted session the value alone is read because the command names the file
    segs = transcript.split("$ cat /sys/fs/cgroup/memory.max\n137438953472\n")
    assert [s.format for s in segs if s.kind == "output"] == ["container_limits"]


def test_kubectl_describe_limits_block_only() -> None:
    text = ("Name:         vllm-7d9f\nContainers:\n  vllm:\n    Limits:\n      cpu:             32\n"
            "      memory:          192Gi\n      nvidia.com/gpu:  4\n    Requests:\n      memory:          64Gi\n")
    assert limits(text) == [(192 * GIB, "kubectl describe: Limits.memory")]


def test_other_text_is_not_this_format() -> None:
    try:
        container_limits.parse("all fine here\n")
    except NotThisFormat:
        return
    raise AssertionError("plain text parsed as a limit")


def test_the_cgroups_oom_kill_count_is_a_memory_kill() -> None:
    """cgroup-v2.rst memory.events ``oom_kill``; v1 memory.oom_control: kills there tie a SIGKILL to memory."""
    collected = "memory.max: 214748364800\nmemory.events:\n  low 0\n  high 0\n  max 12\n  oom 3\n  oom_kill 3\n"
    assert oom_kills(collected) == [3]
    assert oom_kills("$ cat /sys/fs/cgroup/memory.events\nlow 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n") == [1]
    assert oom_kills("oom_kill 1\n", command="cat /sys/fs/cgroup/memory/memory.oom_control") == [1]
    assert oom_kills("memory.events:\n  low 0\n  oom 0\n  oom_kill 0\n") == []  # none happened
    assert oom_kills("memory.max: 1073741824\noom_kill 5\n") == []  # not under an events file


def test_describe_pod_reads_the_launch_the_container_ran() -> None:
    """describe.go prints a container's ``Command:`` and ``Args:`` one item a line: the launch, under that
    container's ``Limits.memory``; args alone run after the image's entrypoint."""
    text = ("Name:             srv-0\nContainers:\n  engine:\n    Image:          vllm/vllm-openai:v0.7.3\n"
            "    Args:\n      --model\n      /models/m-7b\n      --tensor-parallel-size\n      2\n"
            "    State:          Running\n    Limits:\n      memory:          64Gi\n  sidecar:\n"
            "    Image:          busybox:1.36\n    Command:\n      sleep\n      infinity\n")
    r = container_limits.parse(text)
    launches = r.events.filter(r.events["kind"] == "launch_command")
    assert launches.height == 1  # the sidecar runs no engine
    a = json.loads(launches["attrs"][0])
    assert (a["engine"], a["flags"]["--tensor-parallel-size"], a["launcher"]) == ("vllm", "2", "kubernetes")
    assert a["container_memory_bytes"] == 64 * 2**30
    assert (launches["line"][0], launches["line_end"][0]) == (6, 9)  # its elements
