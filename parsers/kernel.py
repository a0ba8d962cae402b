"""Kernel logs in every container: OOM-killer blocks, NVRM Xid, fallen-off-bus, hung tasks.

Sources: reference/system_formats.md (bare sections below are its own): dmesg(1), journalctl(1), RFC 3164, RFC
3339, linux Documentation/ABI/testing/dev-kmsg (5.x), linux mm/oom_kill.c (6.x), linux kernel/hung_task.c
(6.x).

One kernel message reaches us in many shapes (``dmesg`` and its ``-T``/``--time-format iso``/``-r``/
``-x``/``-J``/reltime forms, raw ``/dev/kmsg``, ``journalctl -k`` in short/short-precise/short-iso/
short-iso-precise/short-full/short-monotonic/short-unix/json/json-pretty/verbose, and rsyslog's
``kern.log`` in RFC 3339 or traditional RFC 3164). Each line is first stripped of its container
prefix (:func:`decode_line`), then the message goes through one cheap prefilter and, only when
it may matter, through the content regexes. A sample (``dmesg -T``)::

    [Sun Nov 29 08:27:07 2026] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
    [Sun Nov 29 08:27:07 2026] Memory cgroup out of memory: Killed process 15561 (python3) total-vm:90632kB, anon-rss:65140kB, file-rss:6680kB, shmem-rss:0kB, UID:0 pgtables:196kB oom_score_adj:0

Rows (``docs/timeline.md``): one ``oom_kill`` per OOM-killer block (``line`` = the
``invoked oom-killer`` line, ``line_end`` = the ``Killed process`` line), ``oom_reaper``, ``xid``,
``gpu_fallen_off_bus``, ``hung_task``, ``nvrm`` (other NVIDIA driver lines, repeats counted on the
first row) and ``version`` (kernel and NVIDIA driver). Every other well-formed kernel line is
recognised but not emitted. Clocks: ``uptime_s`` from ``[ 123.456]`` stamps, ``ts`` from stamps
with a zone, ``ts_local`` from zone-less wall clocks; the timeline assembly does the rest.

>>> text = '''[  399.634951] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
... [  399.637768] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/t,task_memcg=/t,task=python3,pid=15561,uid=0
... [  399.637792] Memory cgroup out of memory: Killed process 15561 (python3) total-vm:90632kB, anon-rss:65140kB, file-rss:6680kB, shmem-rss:0kB, UID:0 pgtables:196kB oom_score_adj:0
... [  400.100000] NVRM: Xid (PCI:0000:3B:00): 79, pid=1234, name=python3, GPU has fallen off the bus.'''
>>> r = parse(text)
>>> r.events.select("kind", "line", "line_end", "pid", "comm", "used_bytes", "code", "uptime_s").rows()
[('oom_kill', 1, 3, 15561, 'python3', 73543680, None, 399.634951), ('xid', 4, 4, 1234, 'python3', None, 79, 400.1)]
>>> (r.lines, r.recognized, r.unrecognized)
(4, 4, 0)
>>> sniff(text) > 0.5, sniff("free -g\\n              total        used")
(True, 0.0)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from parsers import jsontext

from .proc_titles import process_identity
from .schema import MAX_UNRECOGNIZED_EXAMPLES, NotThisFormat, ParseResult
from .units import kib

FORMAT = "kernel"

# Content regexes only ever see this much of one message: bounds the cost of a 1 MB line.
_MSG_CAP = 16384
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON_RE = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_WDAY_RE = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warn": 4, "notice": 5, "info": 6, "debug": 7}
_TAG = r"(?P<host>\S+) (?P<tag>[^:\[\s]+)(?:\[(?P<tpid>\d+)\])?:(?: (?P<msg>.*))?$"

# ---------------------------------------------------------------- container prefixes (§3)
# §3 (dmesg, -T, reltime and iso forms; syslog; journalctl short-*, json, verbose; /dev/kmsg)
_DMESG = re.compile(r"^(?:<(?P<pri>\d{1,3})>)?\[\s*(?P<up>\d+\.\d+)\](?: ?\[\s*(?P<caller>[TC]\d+)\])?(?: (?P<msg>.*))?$")
_CTIME = re.compile(r"^\[(?P<ctime>[A-Za-z][^\]]{0,40}? \d\d:\d\d:\d\d \d{4})\](?: (?P<msg>.*))?$")
_RELTIME = re.compile(
    rf"^\[(?:(?P<rmon>{_MON_RE})(?P<rday>\d\d) (?P<rhm>\d\d:\d\d)|<?\s*\+?\s*(?P<delta>\d+\.\d+)>?)\](?: (?P<msg>.*))?$")
_DECODE = re.compile(
    r"^(?P<fac>kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
    r"(?P<lvl>emerg|alert|crit|err|warn|notice|info|debug)\s*: (?P<rest>.*)$")
_ISO_DMESG = re.compile(r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+[+-]\d\d:?\d\d)(?: (?P<msg>.*))?$")
_ISO_SYSLOG = re.compile(r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) " + _TAG)
# §3: RFC 3164 (with the year rsyslog may add), journalctl(1) ``-o short-full`` and ``-o short-unix``
_RFC3164 = re.compile(
    rf"^(?P<mon>{_MON_RE}) (?P<day>[ \d]\d) (?:(?P<year>\d{{4}}) )?(?P<time>\d\d:\d\d:\d\d(?:\.\d+)?) " + _TAG)
_SHORT_FULL = re.compile(
    rf"^(?:{_WDAY_RE}) (?P<date>\d{{4}}-\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?) (?P<tz>[A-Za-z][\w+/-]*) " + _TAG)
_SHORT_UNIX = re.compile(r"^(?P<epoch>\d{9,11}\.\d+) " + _TAG)
# §3 (journalctl -o verbose, /dev/kmsg records)
_VERBOSE_HEAD = re.compile(
    rf"^(?:{_WDAY_RE}) (?P<date>\d{{4}}-\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?) (?P<tz>\S+) \[s=[0-9a-f]+;i=[0-9a-f]+;.*\]$")
_VERBOSE_KV = re.compile(r"^\s+(?P<k>[A-Z_][A-Z0-9_]*)=(?P<v>.*)$")
_KMSG = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),(?P<flags>[^,;]*)(?:,(?P<extra>[^;]*))?;(?P<msg>.*)$")
_KMSG_DICT = re.compile(r"^ [A-Z_][A-Z0-9_]*=")
# The same line-oriented containers for a whole-text scan ([^\S\n] for \s): a line they match and that holds no
# _HOT word is an ordinary kernel line, counted as recognised without a Python-level visit (1M-line dmesg).
_W = r"[^\S\n]"
_BULK_TAG = r" \S+ [^:\[\s]+(?:\[\d+\])?:(?: [^\n]*)?$"
_BULK_SIMPLE = (
    rf"(?:<\d{{1,3}}>)?\[{_W}*\d+\.\d+\](?: ?\[{_W}*[TC]\d+\])?(?: [^\n]*)?$"
    rf"|\[[A-Za-z][^\]\n]{{0,40}}? \d\d:\d\d:\d\d \d{{4}}\](?: [^\n]*)?$"
    rf"|\[(?:(?:{_MON_RE})\d\d \d\d:\d\d|<?{_W}*\+?{_W}*\d+\.\d+>?)\](?: [^\n]*)?$"
    rf"|(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7]){_W}*:"
    rf"(?:emerg|alert|crit|err|warn|notice|info|debug){_W}*: [^\n]*$"
    rf"|\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+[+-]\d\d:?\d\d(?: [^\n]*)?$"
    rf"|\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d){_BULK_TAG}"
    rf"|(?:{_MON_RE}) [ \d]\d (?:\d{{4}} )?\d\d:\d\d:\d\d(?:\.\d+)?{_BULK_TAG}"
    rf"|(?:{_WDAY_RE}) \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [A-Za-z][\w+/-]*{_BULK_TAG}"
    rf"|\d{{9,11}}\.\d+{_BULK_TAG}"
    rf"|\d+,\d+,\d+,[^,;\n]*(?:,[^;\n]*)?;[^\n]*$")
# §3 (the same containers, whole-text)
_BULK_FIRST = re.compile(rf"(?m)(?:{_BULK_SIMPLE})")
_BULK_NOT_SIMPLE = re.compile(rf"(?m)\n(?!(?:{_BULK_SIMPLE}))")
_BULK_YEAR = re.compile(rf"(?m)^(?:\S+{_W}*:\w+{_W}*: )?(?:\[(?:{_WDAY_RE}) (?P<m1>{_MON_RE}) [ \d]\d \d\d:\d\d:\d\d "
                        rf"(?P<y1>\d{{4}})\]|(?:(?:{_WDAY_RE}) )?(?P<y2>\d{{4}})-(?P<m2>\d\d)-\d\d[T ]\d\d:)")
_JOURNAL_MARK = re.compile(r"^-- (?:Logs begin at|Journal begins at|Journal ends|Boot [0-9a-f]+|Reboot|No entries)")
_INLINE_UPTIME = re.compile(r"^\[\s*(?P<up>\d+\.\d+)\](?: ?\[\s*(?P<caller>[TC]\d+)\])?(?: (?P<msg>.*)|$)")
_SHORT_MONO_TAIL = re.compile(r"^(?P<host>\S+) (?P<tag>kernel|[^:\[\s]+\[\d+\]): (?P<msg>.*)$")
# JSON kept one key per line (dmesg -J, journalctl -o json-pretty): "key": value[,]
# §3 (dmesg -J, journalctl(1) ``-o json-pretty``)
_JSON_KV = re.compile(r'^"(?P<k>[^"]{1,200})"\s*:\s*(?P<v>.*?),?$')
_JSON_STRUCT = re.compile(r"^(?:[{}\[\]],?|\},\s*\{|-?\d+,?)$")

# ---------------------------------------------------------------- content (§4-§6)
# The prefilter: only messages holding one of these go to the field regexes. Every alternative starts
# with a literal so the engine skips quickly over the text; it also runs over the whole text at once.
# §4.1, §4.2 (the OOM-killer block), §5 (hung tasks), §6 (NVRM)
_HOT = re.compile(r"oom|Out of memory|Kill|kill|NVRM|Xid|blocked|nvidia|memory|Memory|mems_allowed|Linux version|"
                  r"fallen off|amdgpu")
_OOM_START = re.compile(
    r"(?P<comm>.+?) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-f]+)(?:\((?P<gfp_flags>[^)]*)\))?, "
    r"(?:nodemask=(?P<nodemask>[^,]*), )?order=(?P<order>-?\d+), (?:oom_score_adj|oom_adj|oomkilladj)=(?P<adj>-?\d+)")
_OOM_CPU = re.compile(r"CPU: \d+ (?:UID: \d+ )?PID: (?P<pid>\d+) Comm: ")
_OOM_CPUSET = re.compile(r"(?P<comm>.+?) cpuset=(?P<cpuset>\S*) mems_allowed=(?P<mems>\S*)$")
_OOM_TASK_IN = re.compile(r"Task in (?P<task_memcg>\S+) killed as a result of limit of (?P<memcg>\S+)")
_OOM_MEMCG_USAGE = re.compile(r"memory(?P<sw>\+swap)?: usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB, failcnt (?P<failcnt>\d+)")
# §4.1, §4.2 (memcg stats, the ``oom-kill:constraint=…`` summary), linux mm/oom_kill.c (6.x)
_OOM_MEMCG_STATS = re.compile(r"Memory cgroup stats for (?P<memcg>[^:\s]+):")
_OOM_SUMMARY = re.compile(
    r"oom-kill:constraint=(?P<constraint>CONSTRAINT_\w+),nodemask=(?P<nodemask>[^,]*),cpuset=(?P<cpuset>[^,]*),"
    r"mems_allowed=(?P<mems>[^,]*)(?:,oom_memcg=(?P<oom_memcg>[^,]*))?(?:,(?P<global>global_oom))?"
    r"(?:,task_memcg=(?P<task_memcg>[^,]*))?,task=(?P<task>.*?),pid=(?P<pid>\d+),uid=(?P<uid>\d+)")
# §4.1, §4.2 (victim lines, legacy form, the reaper)
_OOM_KILLED = re.compile(
    r"(?:(?P<reason>Out of memory(?: \(oom_kill_allocating_task\))?|Memory cgroup out of memory): )?"
    r"Killed process (?P<pid>\d+) \((?P<comm>.*)\) total-vm:(?P<total_vm>\d+)kB, anon-rss:(?P<anon>\d+)kB, "
    r"file-rss:(?P<file>\d+)kB(?:, shmem-rss:(?P<shmem>\d+)kB)?(?:,? UID:(?P<uid>\d+))?(?: pgtables:(?P<pgt>\d+)kB)?"
    r"(?: oom_score_adj:(?P<adj>-?\d+))?")
_OOM_LEGACY = re.compile(
    r"(?P<reason>Out of memory|Memory cgroup out of memory): Kill process (?P<pid>\d+) \((?P<comm>.*)\) "
    r"score (?P<score>\d+) or sacrifice child")
_OOM_REAPER = re.compile(
    r"oom_reaper: reaped process (?P<pid>\d+) \((?P<comm>.*)\), now anon-rss:(?P<anon>\d+)kB, "
    r"file-rss:(?P<file>\d+)kB, shmem-rss:(?P<shmem>\d+)kB")
# linux mm/oom_kill.c (6.x: ``Out of memory and no killable processes...``)
_OOM_NO_VICTIM = re.compile(r"Out of memory and no killable processes")
# §5 (hung-task reports)
_HUNG = re.compile(r"INFO: task (?P<comm>.+):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds\.")
_HUNG_OWNER = re.compile(r"INFO: task (?P<comm>.+):(?P<pid>\d+) is blocked on an? (?P<lock>\w+)"
                         r"(?: likely owned by task (?P<owner>.+):(?P<owner_pid>\d+))?")
#: ``comm`` is its first character or ends in a non-blank, so each run of blanks is tried once as the
#: gap before ``state:`` (the same earliest gap as ``.+?\s+``, which re-scanned a run from each of its
#: characters: the square of a line of blanks)
_HUNG_TASKLINE = re.compile(r"task:(?P<comm>.(?:.*?\S)??)\s++state:(?P<state>\S+)(?:.*? pid:\s*(?P<pid>\d+))?"
                            r"(?:.*? tgid:\s*(?P<tgid>\d+))?(?:.*? ppid:\s*(?P<ppid>\d+))?")
_HUNG_FOLLOW = re.compile(
    r"(?:Tainted:|Not tainted|\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\"|task:\S|Call [Tt]race:|"
    r"</?(?:TASK|IRQ)>|(?:\? )?(?:\[<[0-9a-f]+>\] )?(?:\? )?[\w.$]+\+0x[0-9a-f]+/0x[0-9a-f]+|(?:[0-9a-f]{8,}+ ?)++$|"
    r"\S+\s+D\s+[0-9a-f]+\s+\d+\s+\d+\s+\d+\s+0x[0-9a-f]+|[A-Z0-9]{2,4}: [0-9a-f]{4}|Showing all locks held)")
_PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
# §6.1 (the Xid line), §6.2 (other NVRM and NVIDIA messages)
_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?(?P<bdf>{_PCI}|[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{2}})\): (?P<xid>\d+)(?P<rest>.*)$")
_XID_REST = re.compile(r"^(?:,\s*pid=(?P<pid>'?<unknown>'?|'?\d+'?))?(?:,\s*name=(?P<name>[^,]*))?(?:,\s*(?P<detail>.*))?$")
_FELL = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?(?P<bdf>{_PCI}):? (?:GPU )?has fallen off the bus")
_FELL_ML = re.compile(rf"NVRM: The NVIDIA GPU (?P<bdf>{_PCI})")
_GPU_AT = re.compile(rf"NVRM: GPU at PCI:(?P<bdf>{_PCI}): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_DRIVER = re.compile(r"NVRM: loading NVIDIA UNIX .*?Kernel Module(?: for \S+)?\s+(?P<ver>\d+\.\d+(?:\.\d+)?)")
# §3 (the boot banner ``Linux version …``); §6.2 (NVSwitch SXid lines, reference/system_formats.md)
_LINUX_VERSION = re.compile(r"Linux version (?P<ver>\S+)")
_SXID = re.compile(rf"(?P<dev>nvidia-nvswitch\d*): SXid \((?:PCI:)?(?P<bdf>{_PCI})\): (?P<sxid>\d+),\s*(?P<detail>.*)$")
# §6.2
_PROBE = re.compile(rf"nvidia(?:-\w+)?: probe of (?P<bdf>{_PCI}) failed")
_ANY_BDF = re.compile(rf"(?:PCI:)?(?P<bdf>{_PCI})")
_NVRM_TABLE_ROW = re.compile(r"NVRM: {3,}")  # GSP RPC history tables: many rows, not events
_NVIDIA_TROUBLE = re.compile(r"(?i)error|fail|timeout|timed out|not responding|fallen")
# Xid detail decoders (§6.1)
# §6.3 (Xid catalog: the detail each code prints)
_X13_SM = re.compile(r"Graphics SM (?P<scope>Warp|Global) Exception on \(GPC (?P<gpc>\d+), TPC (?P<tpc>\d+), "
                     r"SM (?P<sm>\d+)\): (?P<exc>.*)")
_X31 = re.compile(r"Ch (?P<ch>[0-9a-f]+), intr (?P<intr>[0-9a-f]+)\.\s*MMU Fault: ENGINE (?P<engine>\S+) (?P<client>\S+) "
                  r"faulted @ (?P<addr>0x[0-9a-f_]+)\.\s*Fault is of type (?P<ftype>\S+) (?P<access>\S+)")
_X74 = re.compile(r"NVLink: fatal error detected on link (?P<link>\d+)\((?P<regs>[^)]*)\)")
_X109 = re.compile(r"Ch (?P<ch>[0-9a-f]+), errorString (?P<err>[^,]+), Info (?P<info>0x[0-9a-f]+)")
_X119 = re.compile(r"Timeout after (?P<s>\d+)s of waiting for RPC response from GPU(?P<inst>\d+) GSP! "
                   r"Expected function (?P<fn>\d+) \((?P<fname>\w+)\)")
_XNVL5 = re.compile(r"(?<![A-Z0-9_/])(?P<sub>[A-Z0-9_]++(?:/[A-Z0-9_]++)?)\s+(?P<sev>Fatal|Nonfatal)\s+(?P<xc>XC[01])\s+(?P<inj>i\d)\s+"
                    r"Link\s+(?P<link>-?\d+)\s+\((?P<intr>0x[0-9a-fA-F]+)\s+(?P<status>0x[0-9a-fA-F]+)"
                    r"(?P<dbg>(?:\s+0x[0-9a-fA-F]+)*)\)")
# §6.1 (Xid 154: the recovery action; the channel id of the Xid details)
_X154 = re.compile(r"GPU recovery action changed from (?P<f>0x[0-9a-f]+) \((?P<fs>[^)]*)\) to (?P<t>0x[0-9a-f]+) \((?P<ts>[^)]*)\)")
_XCHAN = re.compile(r"(?:Ch|Channel|Channel ID) (?P<ch>[0-9a-f]{8})\b")

# sniff: container lines that only a kernel log has, and content that only the kernel prints
# §3, §4.1, §6.1
_SNIFF_KERNEL = re.compile(
    r"^(?:<\d{1,3}>)?\[\s*\d+\.\d+\]|^\[(?:" + _WDAY_RE + r") (?:" + _MON_RE + r") [ \d]\d \d\d:\d\d:\d\d \d{4}\]|"
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+[+-]\d\d:?\d\d |^\d+,\d+,\d+,[^,;]*[,;]|^kern\s*:\w+\s*: |"
    r"^\S.{0,40}? \S+ kernel: |^\[\s*\+\d+\.\d+\] ")
_SNIFF_JSON = re.compile(r'^\s*"dmesg"\s*:\s*\[|"_TRANSPORT"\s*:\s*"kernel"|^\s+_TRANSPORT=kernel$')
_SNIFF_SYSLOG = re.compile(r"^(?:" + _MON_RE + r") [ \d]\d \d\d:\d\d:\d\d \S+ [^:\[\s]+(?:\[\d+\])?: |"
                           r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* \S+ [^:\[\s]+(?:\[\d+\])?: ")
# AMD's GPU driver, the XID-like events (linux drivers/gpu/drm/amd/amdgpu/amdgpu_job.c::amdgpu_job_timedout (5.x-6.x):
# a job outran the scheduler's timeout, "ring %s timeout, signaled seq=%u, emitted seq=%u", or "ring %s timeout, but
# soft recovered" when soft recovery freed it; linux drivers/gpu/drm/amd/amdgpu/amdgpu_device.c (5.x-6.x): "GPU reset
# begin!" as the driver resets the GPU; linux drivers/gpu/drm/amd/amdgpu/gmc_v9_0.c::gmc_v9_0_process_interrupt
# (5.x-6.x) and gmc_v10_0.c: "[%s] %s page fault (src_id:%u ring:%u vmid:%u pasid:%u, for process %s pid %d ...")
_AMD_PCI = re.compile(r"\bamdgpu (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.\d: ")
_AMD_RING = re.compile(r"\b[Rr]ing (?P<ring>\S+) timeout, (?:signaled seq=\d+, emitted seq=\d+|(?P<soft>but soft recovered))")
_AMD_RESET = re.compile(r"\bGPU reset begin!")
_AMD_FAULT = re.compile(r"\[(?P<hub>gfxhub|mmhub)\d*\] (?:(?:no-)?retry )?page fault \(src_id:\d+ ring:(?P<ring>\d+) "
                        r"vmid:\d+ pasid:\d+(?:, for process (?P<proc>\S+) pid (?P<pid>\d+))?")
_SNIFF_CONTENT = re.compile(r"invoked oom-killer: gfp_mask=|Killed process \d+ \(|NVRM: Xid \(|oom-kill:constraint=|"
                            r"INFO: task .+:\d+ blocked for more than \d+ seconds|NVRM: GPU ")


def normalize_pci(raw: str) -> str:
    """A kernel or nvidia-smi PCI address as ``dddd:bb:dd`` (lowercase, no function).

    >>> normalize_pci("PCI:0000:3B:00"), normalize_pci("00000000:3B:00.0"), normalize_pci("0006:00")
    ('0000:3b:00', '0000:3b:00', '0000:06:00')
    """
    s = raw.strip().lower()
    s = s.removeprefix("pci:")
    parts = s.split(":")
    if len(parts) == 3:
        dom, bus, dev = parts
    elif len(parts) == 2:  # very old drivers: "(0006:00)" = bus:device, no domain
        dom, (bus, dev) = "0", parts
    else:
        return s
    dev = dev.split(".", 1)[0]
    return f"{dom[-4:].rjust(4, '0')}:{bus[-2:].rjust(2, '0')}:{dev[-2:].rjust(2, '0')}"


# ---------------------------------------------------------------- records


@dataclass(slots=True)
class _Rec:
    """One kernel message with its container's clock fields."""

    line: int
    msg: str
    raw: str
    up: float | None = None
    stamp: tuple | None = None  # ("iso"|"ctime"|"syslog"|"full"|"epoch"|"usec"|"reltime", ...)
    host: str | None = None
    level: int | None = None
    cont: bool = False  # a continuation line of the previous message (no stamp of its own)
    bare: bool = False  # no container prefix at all (dmesg -t, pasted messages)
    tag: str | None = None
    extra: dict[str, Any] | None = None


def _level_of(pri: str | int | None) -> int | None:
    try:
        return int(pri) & 7 if pri is not None else None
    except (TypeError, ValueError):
        return None


def _split_inline_uptime(msg: str | None) -> tuple[str, float | None, str | None]:
    """rsyslog/journal lines keep the kernel's ``[ 123.4]`` inside the message."""
    msg = msg or ""
    if msg.startswith("["):
        m = _INLINE_UPTIME.match(msg)
        if m:
            return m.group("msg") or "", float(m.group("up")), m.group("caller")
    return msg, None, None


def _syslog_rec(n: int, line: str, m: re.Match, stamp: tuple) -> _Rec:
    tag = m.group("tag")
    msg, up, caller = _split_inline_uptime(m.group("msg"))
    rec = _Rec(n, msg, line, up=up, stamp=stamp, host=m.group("host"), tag=tag)
    if caller:
        rec.extra = {"caller": caller}
    return rec


def _dmesg_rest(n: int, line: str, rest: str, level: int | None) -> _Rec | None:
    """The part after ``dmesg -x``'s ``kern  :warn  :`` prefix: any dmesg time format."""
    m = _DMESG.match(rest)
    if m:
        return _Rec(n, m.group("msg") or "", line, up=float(m.group("up")), level=level)
    m = _ISO_DMESG.match(rest)
    if m:
        return _Rec(n, m.group("msg") or "", line, stamp=("iso", m.group("iso")), level=level)
    m = _CTIME.match(rest)
    if m:
        return _Rec(n, m.group("msg") or "", line, stamp=("ctime", m.group("ctime")), level=level)
    return _Rec(n, rest, line, level=level)  # dmesg -x -t: no time at all


def _decode_bracket(n: int, line: str) -> _Rec | None:
    m = _DMESG.match(line)
    if m:
        msg = m.group("msg") or ""
        up = float(m.group("up"))
        if m.group("pri") is None and m.group("caller") is None:
            t = _SHORT_MONO_TAIL.match(msg)
            if t:  # journalctl -o short-monotonic: "[  399.63] vm kernel: msg"
                return _Rec(n, t.group("msg"), line, up=up, host=t.group("host"),
                            tag=t.group("tag").split("[", 1)[0])
        rec = _Rec(n, msg, line, up=up, level=_level_of(m.group("pri")))
        if m.group("caller"):
            rec.extra = {"caller": m.group("caller")}
        return rec
    m = _CTIME.match(line)
    if m:
        return _Rec(n, m.group("msg") or "", line, stamp=("ctime", m.group("ctime")))
    m = _RELTIME.match(line)
    if m:
        rel = f"{m.group('rmon')}{m.group('rday')} {m.group('rhm')}" if m.group("rmon") else f"+{m.group('delta')}"
        return _Rec(n, m.group("msg") or "", line, stamp=("reltime", rel))
    return None


def _decode_digit(n: int, line: str) -> _Rec | None:
    if len(line) > 19 and line[4] == "-" and line[10] == "T":
        m = _ISO_DMESG.match(line)
        if m:
            return _Rec(n, m.group("msg") or "", line, stamp=("iso", m.group("iso")))
        m = _ISO_SYSLOG.match(line)
        if m:
            return _syslog_rec(n, line, m, ("iso", m.group("iso")))
        return None
    m = _KMSG.match(line)
    if m:
        prio = int(m.group("prio"))
        rec = _Rec(n, m.group("msg"), line, up=int(m.group("usec")) / 1e6, level=prio & 7)
        rec.extra = {"seq": int(m.group("seq"))}
        if m.group("extra"):
            rec.extra["caller"] = m.group("extra")
        return rec
    m = _SHORT_UNIX.match(line)
    if m:
        return _syslog_rec(n, line, m, ("epoch", float(m.group("epoch"))))
    return None


def _decode_letter(n: int, line: str) -> _Rec | None:
    m = _RFC3164.match(line)
    if m:
        stamp = ("syslog", _MONTHS[m.group("mon")], int(m.group("day")), m.group("time"))
        if m.group("year"):  # some templates print the year: "Nov 29 2026 08:50:41"
            stamp = ("iso", f"{m.group('year')}-{stamp[1]:02d}-{stamp[2]:02d}T{stamp[3]}")
        return _syslog_rec(n, line, m, stamp)
    m = _DECODE.match(line)
    if m:
        return _dmesg_rest(n, line, m.group("rest"), _LEVELS[m.group("lvl")])
    m = _SHORT_FULL.match(line)
    if m:
        return _syslog_rec(n, line, m, ("full", m.group("date"), m.group("time"), m.group("tz")))
    return None


def decode_line(n: int, line: str) -> _Rec | None:
    """Strip one line's container prefix; None when the line is in no line-oriented container.

    >>> r = decode_line(7, "Nov 29 08:28:49 vm kernel: [  500.985418] python3 invoked oom-killer: x")
    >>> (r.line, r.host, r.up, r.stamp, r.msg)
    (7, 'vm', 500.985418, ('syslog', 11, 29, '08:28:49'), 'python3 invoked oom-killer: x')
    """
    c = line[:1]
    if c == "[":
        return _decode_bracket(n, line)
    if c == "<":
        m = _DMESG.match(line)
        if m:
            return _Rec(n, m.group("msg") or "", line, up=float(m.group("up")), level=_level_of(m.group("pri")))
        return None
    if c.isdigit():
        return _decode_digit(n, line)
    if c.isalpha():
        return _decode_letter(n, line)
    return None


def _journal_rec(n: int, obj: dict) -> list[_Rec]:
    """A journald record (``-o json``/``json-pretty``/``verbose``) → one record per message line."""
    msg = obj.get("MESSAGE")
    if isinstance(msg, list):  # not valid UTF-8: journald writes the bytes
        try:
            msg = bytes(int(b) & 0xFF for b in msg).decode("utf-8", "replace")
        except (TypeError, ValueError):
            msg = None
    if not isinstance(msg, str):
        return []
    rt, mono = str(obj.get("__REALTIME_TIMESTAMP", "")), str(obj.get("_SOURCE_MONOTONIC_TIMESTAMP", ""))
    stamp = ("usec", int(rt)) if rt.isdigit() else None
    up = int(mono) / 1e6 if mono.isdigit() else None
    host = obj.get("_HOSTNAME") if isinstance(obj.get("_HOSTNAME"), str) else None
    tag = obj.get("SYSLOG_IDENTIFIER") or ("kernel" if obj.get("_TRANSPORT") == "kernel" else None)
    tag = str(tag) if tag else None
    extra = {"boot_id": obj["_BOOT_ID"]} if isinstance(obj.get("_BOOT_ID"), str) else None
    parts = msg.split("\n")
    recs = [_Rec(n, parts[0], parts[0], up=up, stamp=stamp, host=host, level=_level_of(obj.get("PRIORITY")),
                 tag=tag, extra=extra)]
    recs += [_Rec(n, p, p, up=up, stamp=stamp, host=host, cont=True, tag=tag) for p in parts[1:] if p]
    return recs


def _dmesg_json_rec(n: int, obj: dict) -> list[_Rec]:
    """One record of ``dmesg -J``: ``{"pri": 4, "time": 399.634951, "msg": "..."}``."""
    msg = obj.get("msg")
    if not isinstance(msg, str):
        return []
    t = obj.get("time")
    up = float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None
    stamp = ("iso", t) if isinstance(t, str) and "T" in t else None  # dmesg -J --time-format iso
    rec = _Rec(n, msg, msg, up=up, stamp=stamp, level=_level_of(obj.get("pri")))
    if isinstance(obj.get("caller"), str):
        rec.extra = {"caller": obj["caller"]}
    return [rec]


def _json_record(n: int, obj: Any) -> list[_Rec] | None:
    """Records of one JSON object, or None when it is no kernel/journal record at all."""
    if not isinstance(obj, dict):
        return None
    if "MESSAGE" in obj or "__REALTIME_TIMESTAMP" in obj:
        return _journal_rec(n, obj)
    if "msg" in obj and ("pri" in obj or "time" in obj):
        return _dmesg_json_rec(n, obj)
    return None


# ---------------------------------------------------------------- time columns


def _parse_iso(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s.replace(",", ".", 1))
    except ValueError:
        return None


def _time_cols(rec: _Rec) -> dict[str, Any]:
    """ts / ts_local / uptime_s and clock attrs of one record, from its container's stamp."""
    out: dict[str, Any] = {"uptime_s": rec.up, "ts_basis": "none"}
    attrs: dict[str, Any] = {}
    st = rec.stamp
    if st is not None:
        kind = st[0]
        if kind == "iso":
            dt = _parse_iso(st[1])
            if dt is not None:
                out["ts_local"] = dt.replace(tzinfo=None)
                if dt.tzinfo is not None:
                    out["ts"] = dt.astimezone(UTC)
                    out["ts_basis"] = "source-utc"
        elif kind in ("usec", "epoch"):
            secs = st[1] / 1e6 if kind == "usec" else st[1]
            try:
                out["ts"] = datetime.fromtimestamp(secs, UTC)
                out["ts_basis"] = "source-utc"
            except (OverflowError, OSError, ValueError):
                pass
        elif kind == "ctime":
            try:
                out["ts_local"] = datetime.strptime(" ".join(st[1].split()), "%a %b %d %H:%M:%S %Y")
            except ValueError:  # localized day/month names (dmesg -T under a non-C locale)
                attrs["ctime"] = st[1]
        elif kind == "full":
            dt = _parse_iso(f"{st[1]}T{st[2]}")
            if dt is not None:
                out["ts_local"] = dt
                if st[3] in ("UTC", "GMT", "Z"):
                    out["ts"] = dt.replace(tzinfo=UTC)
                    out["ts_basis"] = "source-utc"
                else:
                    attrs["tz_abbrev"] = st[3]
        elif kind == "syslog":
            attrs.update(syslog_month=st[1], syslog_day=st[2], syslog_time=st[3])
        elif kind == "reltime":
            attrs["reltime"] = st[1]
    if rec.host:
        out["host"] = rec.host
    if rec.level is not None:
        attrs["level"] = rec.level
    if rec.extra:
        attrs.update(rec.extra)
    out["_attrs"] = attrs
    return out


# ---------------------------------------------------------------- content analysis


def _bytes_kib(v: str | None) -> int | None:
    return kib(int(v)) if v is not None else None


@dataclass
class _Oom:
    line: int
    first: _Rec
    attrs: dict[str, Any] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    has_start: bool = False
    victim: dict[str, Any] = field(default_factory=dict)


class _Content:
    """Turns the stream of kernel messages into timeline rows (blocks, pairing, dedupe)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.oom: _Oom | None = None
        self.orphans: list[tuple[dict, tuple]] = []
        self.complete_keys: set[tuple] = set()
        self.killed: dict[int, dict] = {}  # victim pid → its oom_kill row (for the reaper)
        self.hung: dict | None = None
        self.hung_seen: dict[int, int] = {}
        self.last_nvrm: dict | None = None
        self.last_nvrm_rec: _Rec | None = None
        self.nvrm_repeat = False
        self.pending_ml: dict | None = None
        self.nvrm_seen: dict[str, dict] = {}
        self.pci_uuid: dict[str, str] = {}
        self.last_xid: tuple[dict, int] | None = None
        self.xid79: dict[str, int] = {}

    # -- rows
    def _row(self, rec: _Rec, kind: str, attrs: dict[str, Any] | None = None, **cols: Any) -> dict[str, Any]:
        t = _time_cols(rec)
        a = t.pop("_attrs")
        if attrs:
            a.update({k: v for k, v in attrs.items() if v is not None})
        if cols.get("comm"):  # the 15-char comm of an engine process: sglang::schedul, VLLM::Worker_TP
            a.update(process_identity(cols["comm"]))
        row = {"line": rec.line, "kind": kind, "text": rec.raw, **t, **cols, "attrs": a}
        self.rows.append(row)
        return row

    # -- entry point
    def feed(self, rec: _Rec) -> bool:
        """Analyse one message; True when it is kernel content we understood (matters for bare lines)."""
        m = rec.msg if len(rec.msg) <= _MSG_CAP else rec.msg[:_MSG_CAP]
        s = m.strip()
        if rec.bare and s.startswith("#"):  # comments in pasted notes are never kernel output
            return False
        if self.hung is not None:
            if self._hung_follow(rec, s):
                return True
            self.hung = None
        if self.last_xid is not None and rec.bare and s.startswith(("MMU Fault:", "Fault is of type")):
            return self._xid_continuation(rec, s)
        if self.pending_ml is not None and self._ml_follow(rec, s):
            return True
        in_block = self.oom is not None and rec.line - self.oom.line < 400
        if self.oom is not None and "invoker_pid" not in self.oom.attrs and s.startswith("CPU:"):
            cm = _OOM_CPU.match(s)
            if cm:
                self.oom.attrs["invoker_pid"] = int(cm.group("pid"))
                return True
        if not _HOT.search(s):
            return in_block
        return self._dispatch(rec, s) or in_block

    def _dispatch(self, rec: _Rec, s: str) -> bool:
        if "NVRM" in s:
            return self._nvrm(rec, s)
        if "amdgpu" in s and self._amdgpu(rec, s):
            return True
        if "oom" in s or "ill" in s or "emory" in s or "mems_allowed" in s:
            hit = self._oom_line(rec, s)
            if hit:
                return True
        if "blocked" in s:
            return self._hung_start(rec, s)
        if "nvidia" in s or (rec.tag or "").startswith("nvidia"):
            return self._nvidia(rec, s)
        if "Linux version" in s:
            vm = _LINUX_VERSION.search(s)
            if vm:
                self._row(rec, "version", {"component": "kernel", "version": vm.group("ver")})
                return True
        return False

    # -- OOM killer (§4)
    def _open_oom(self, rec: _Rec) -> _Oom:
        if self.oom is None:
            self.oom = _Oom(rec.line, rec)
        return self.oom

    def _oom_line(self, rec: _Rec, s: str) -> bool:
        if "invoked oom-killer" in s:
            m = _OOM_START.match(s)
            if m:
                self._start_oom(rec, m)
                return True
        if "Killed process" in s:
            m = _OOM_KILLED.match(s)
            if m:
                self._kill(rec, m)
                return True
        if "Kill process" in s:
            m = _OOM_LEGACY.match(s)
            if m:
                b = self._open_oom(rec)
                b.victim.update(pid=int(m.group("pid")), comm=m.group("comm"))
                b.attrs.update(reason=m.group("reason"), score=int(m.group("score")))
                b.texts.append(rec.raw)
                return True
        if s.startswith("oom-kill:"):
            m = _OOM_SUMMARY.match(s)
            if m:
                self._summary(rec, m)
                return True
        if s.startswith("oom_reaper:"):
            m = _OOM_REAPER.match(s)
            if m:
                self._reaper(rec, m)
                return True
        if s.startswith("Out of memory and no killable"):
            if self.oom is not None:
                self.oom.attrs["no_killable_process"] = True
                self._close_oom(rec, complete=False)
            return True
        return self._oom_detail(rec, s)

    def _oom_detail(self, rec: _Rec, s: str) -> bool:
        """Lines inside a block that name the memcg and its limit."""
        if s.startswith("memory"):
            m = _OOM_MEMCG_USAGE.match(s)
            if m:
                b = self._open_oom(rec)
                key = "memsw" if m.group("sw") else "memcg"
                b.attrs.setdefault(f"{key}_usage_bytes", _bytes_kib(m.group("usage")))
                b.attrs.setdefault(f"{key}_limit_bytes", _bytes_kib(m.group("limit")))
                if not m.group("sw"):
                    b.attrs.setdefault("memcg_failcnt", int(m.group("failcnt")))
                    b.texts.append(rec.raw)
                return True
        if s.startswith("Task in "):
            m = _OOM_TASK_IN.match(s)
            if m:
                b = self._open_oom(rec)
                b.attrs.setdefault("memcg", m.group("memcg"))
                b.attrs.setdefault("task_memcg", m.group("task_memcg"))
                return True
        if s.startswith("Memory cgroup stats for"):
            m = _OOM_MEMCG_STATS.match(s)
            if m:
                self._open_oom(rec).attrs.setdefault("memcg", m.group("memcg"))
                return True
        if self.oom is not None and "mems_allowed=" in s:
            m = _OOM_CPUSET.match(s)
            if m:
                self.oom.attrs.setdefault("cpuset", m.group("cpuset"))
                self.oom.attrs.setdefault("mems_allowed", m.group("mems"))
                return True
        return False

    def _start_oom(self, rec: _Rec, m: re.Match) -> None:
        if self.oom is not None:  # a block without its Killed line: truncated or lost
            self._close_oom(None, complete=False)
        b = self._open_oom(rec)
        b.has_start = True
        b.attrs.update(invoker=m.group("comm"), gfp_mask=m.group("gfp"), gfp_flags=m.group("gfp_flags"),
                       order=int(m.group("order")), invoker_oom_score_adj=int(m.group("adj")))
        if m.group("nodemask") is not None:
            b.attrs["nodemask"] = m.group("nodemask")
        b.texts.append(rec.raw)

    def _summary(self, rec: _Rec, m: re.Match) -> None:
        b = self._open_oom(rec)
        a = b.attrs
        a.update(constraint=m.group("constraint"), nodemask=m.group("nodemask"), cpuset=m.group("cpuset"),
                 mems_allowed=m.group("mems"), victim_task=m.group("task"), victim_uid=int(m.group("uid")))
        if m.group("oom_memcg") is not None:
            a["memcg"] = m.group("oom_memcg")
        if m.group("task_memcg") is not None:
            a["task_memcg"] = m.group("task_memcg")
        a["global_oom"] = bool(m.group("global"))
        a["summary_pid"] = int(m.group("pid"))
        b.victim.setdefault("pid", a["summary_pid"])
        b.victim.setdefault("comm", m.group("task"))
        b.texts.append(rec.raw)

    def _kill(self, rec: _Rec, m: re.Match) -> None:
        # The kernel serialises OOM kills (oom_lock): a Killed line closes the block that is open, whatever
        # lines were interleaved; a Killed line with no open block is a block whose head was lost.
        pid = int(m.group("pid"))
        if self.oom is not None and self.oom.attrs.get("summary_pid", pid) != pid:
            self._close_oom(None, complete=False)  # the summary named another victim: not this block
        b = self._open_oom(rec)
        anon, file_, shmem = (_bytes_kib(m.group(g)) for g in ("anon", "file", "shmem"))
        b.victim.update(pid=pid, comm=m.group("comm"))
        b.attrs.update(total_vm_bytes=_bytes_kib(m.group("total_vm")), anon_rss_bytes=anon, file_rss_bytes=file_,
                       shmem_rss_bytes=shmem, pgtables_bytes=_bytes_kib(m.group("pgt")))
        if m.group("reason"):
            b.attrs["reason"] = m.group("reason")
        if m.group("uid") is not None:
            b.attrs["victim_uid"] = int(m.group("uid"))
        if m.group("adj") is not None:
            b.attrs["oom_score_adj"] = int(m.group("adj"))
        b.texts.append(rec.raw)
        self._close_oom(rec, complete=True)

    def _close_oom(self, end: _Rec | None, *, complete: bool) -> None:
        b = self.oom
        self.oom = None
        if b is None:
            return
        a = b.attrs
        used = None
        if a.get("anon_rss_bytes") is not None:
            used = sum(a.get(k) or 0 for k in ("anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes"))
        a["complete"] = complete
        row = self._row(b.first, "oom_kill", a, pid=b.victim.get("pid"), comm=b.victim.get("comm"), used_bytes=used)
        row["line_end"] = end.line if end is not None else b.line
        row["text"] = "\n".join(b.texts) if b.texts else b.first.raw
        key = (a.get("invoker"), a.get("invoker_pid"), a.get("gfp_mask"), a.get("order"))
        if complete:
            self.complete_keys.add(key)
            if row["pid"] is not None:
                self.killed[row["pid"]] = row
        elif a.get("invoker_pid") is not None:
            self.orphans.append((row, key))

    def _reaper(self, rec: _Rec, m: re.Match) -> None:
        pid = int(m.group("pid"))
        attrs = {"anon_rss_bytes": _bytes_kib(m.group("anon")), "file_rss_bytes": _bytes_kib(m.group("file")),
                 "shmem_rss_bytes": _bytes_kib(m.group("shmem"))}
        kill = self.killed.get(pid)
        if kill is not None:
            attrs["kill_line"] = kill["line"]
            kill["attrs"]["reaper_line"] = rec.line
        self._row(rec, "oom_reaper", attrs, pid=pid, comm=m.group("comm"))

    def finish(self) -> None:
        self._close_oom(None, complete=False)
        self._flush_ml()
        # A head without a Killed line that another, complete block repeats (journald or rsyslog
        # replays, one event shown in several formats) is the same event: keep only the complete one.
        drop = {id(row) for row, key in self.orphans if key in self.complete_keys}
        if drop:
            self.rows = [r for r in self.rows if id(r) not in drop]

    # -- hung tasks (§5)
    def _hung_start(self, rec: _Rec, s: str) -> bool:
        i = s.find("INFO: task ")
        if i < 0 or (i > 0 and rec.bare):
            return False
        m = _HUNG.match(s, i)
        if m:
            pid = int(m.group("pid"))
            attrs: dict[str, Any] = {}
            if pid in self.hung_seen:
                attrs["repeat_of_line"] = self.hung_seen[pid]
            else:
                self.hung_seen[pid] = rec.line
            row = self._row(rec, "hung_task", attrs, pid=pid, comm=m.group("comm"), seconds=float(m.group("secs")))
            row["_texts"] = [rec.raw]
            self.hung = row
            return True
        m = _HUNG_OWNER.match(s, i)
        if m:
            self._hung_owner(m)
            return True
        return False

    def _hung_owner(self, m: re.Match) -> None:
        pid = int(m.group("pid"))
        for row in reversed(self.rows):
            if row["kind"] == "hung_task" and row.get("pid") == pid:
                row["attrs"].update(blocked_on=m.group("lock"), owner_comm=m.group("owner"),
                                    owner_pid=int(m.group("owner_pid")) if m.group("owner_pid") else None)
                break

    def _hung_follow(self, rec: _Rec, s: str) -> bool:
        row = self.hung
        if s.startswith("INFO: task ") and " is blocked on " in s:
            m = _HUNG_OWNER.match(s)
            if m:
                self._hung_owner(m)
                self._extend_hung(row, rec)
                return True
        if not s or not _HUNG_FOLLOW.match(s):
            return False
        if s.startswith("task:"):
            t = _HUNG_TASKLINE.match(s)
            if t:
                row["attrs"]["state"] = t.group("state")
                for k in ("tgid", "ppid"):
                    if t.group(k):
                        row["attrs"][k] = int(t.group(k))
        elif s.startswith(("Tainted:", "Not tainted")):
            row["attrs"]["tainted"] = s.startswith("Tainted:")
        self._extend_hung(row, rec)
        return True

    @staticmethod
    def _extend_hung(row: dict, rec: _Rec) -> None:
        row["line_end"] = rec.line
        texts = row["_texts"]
        if len(texts) < 64:
            texts.append(rec.raw)

    # -- AMD GPU driver (linux drivers/gpu/drm/amd/amdgpu, the patterns above)
    def _amdgpu(self, rec: _Rec, s: str) -> bool:
        pm = _AMD_PCI.search(s)
        pci = normalize_pci(pm.group("bdf")) if pm else None
        if m := _AMD_RING.search(s):
            event = "ring_soft_recovered" if m.group("soft") else "ring_timeout"
            self._row(rec, "amdgpu_fault", {"event": event, "ring": m.group("ring"), "pci_bus_id": pci, "message": s})
            return True
        if _AMD_RESET.search(s):
            self._row(rec, "amdgpu_fault", {"event": "gpu_reset", "pci_bus_id": pci, "message": s})
            return True
        if m := _AMD_FAULT.search(s):
            pid = int(m.group("pid")) if m.group("pid") else None
            self._row(rec, "amdgpu_fault", {"event": "page_fault", "hub": m.group("hub"), "ring": m.group("ring"),
                                            "pci_bus_id": pci, "message": s}, pid=pid, comm=m.group("proc"))
            return True
        return False

    # -- NVIDIA driver (§6)
    def _nvrm(self, rec: _Rec, s: str) -> bool:
        i = s.find("NVRM:")
        if i < 0 or (i > 0 and rec.bare):  # a bare line must be the message itself, not prose quoting it
            return False if rec.bare else self._nvidia(rec, s)
        body = s[i:]
        if body.startswith("NVRM: Xid"):
            m = _XID.match(body)
            if m:
                self._xid(rec, m)
                return True
        if self._merge_nvrm_continuation(rec, body):
            return True
        if "fallen off the bus" in body:
            m = _FELL.match(body)
            if m:
                self._fell(rec, m.group("bdf"), body)
                return True
        if body.startswith("NVRM: The NVIDIA GPU"):
            m = _FELL_ML.match(body)
            if m:
                self._flush_ml()
                self.pending_ml = {"rec": rec, "bdf": m.group("bdf"), "msgs": [body], "end": rec.line}
                return True
        if _NVRM_TABLE_ROW.match(body):
            return True
        attrs: dict[str, Any] = {"message": body}
        m = _GPU_AT.match(body)
        if m:
            pci = normalize_pci(m.group("bdf"))
            self.pci_uuid[pci] = m.group("uuid")
            attrs.update(pci_bus_id=pci, gpu_uuid=m.group("uuid"))
        else:
            m = _DRIVER.match(body)
            if m:
                self._row(rec, "version", {"component": "nvidia_driver", "version": m.group("ver")})
            bm = _ANY_BDF.search(body)
            if bm:
                attrs["pci_bus_id"] = normalize_pci(bm.group("bdf"))
            if "fallen off the bus" in body:
                attrs["fallen_off_bus"] = True
        self._nvrm_row(rec, body, attrs)
        return True

    def _nvrm_row(self, rec: _Rec, message: str, attrs: dict[str, Any]) -> None:
        """One row per distinct message; repeats (os_schedule every 2 s, peermem) only bump its count."""
        seen = self.nvrm_seen.get(message)
        if seen is not None:
            seen["count"] += 1
            seen["attrs"]["last_line"] = rec.line
            self.last_nvrm, self.last_nvrm_rec, self.nvrm_repeat = seen, rec, True
            return
        row = self._row(rec, "nvrm", attrs, count=1)
        self.nvrm_seen[message] = row
        self.last_nvrm, self.last_nvrm_rec, self.nvrm_repeat = row, rec, False

    def _merge_nvrm_continuation(self, rec: _Rec, body: str) -> bool:
        """Continuation lines of one multi-line NVRM printk (crash-dump notice) join the row before."""
        row, prev = self.last_nvrm, self.last_nvrm_rec
        if row is None or prev is None or not 0 <= rec.line - prev.line <= 1:
            return False
        if not (rec.cont or (rec.up is not None and rec.up == prev.up)):
            return False
        self.last_nvrm_rec = rec
        if self.nvrm_repeat:  # the continuation of a repeated message is already on the first row
            return True
        row["attrs"]["message"] = f"{row['attrs']['message']} {body.removeprefix('NVRM:').strip()}".strip()
        row["line_end"] = rec.line
        row["text"] = f"{row['text']}\n{rec.raw}"
        return True

    def _xid(self, rec: _Rec, m: re.Match) -> None:
        code = int(m.group("xid"))
        rest = _XID_REST.match(m.group("rest").rstrip())
        pid = comm = detail = None
        if rest:
            p = (rest.group("pid") or "").strip("'")
            pid = int(p) if p.isdigit() else None
            name = (rest.group("name") or "").strip()
            comm = name if name and name != "<unknown>" else None
            detail = (rest.group("detail") or "").strip() or None
        pci = normalize_pci(m.group("bdf"))
        attrs: dict[str, Any] = {"pci_bus_id": pci, "message": detail, "gpu_uuid": self.pci_uuid.get(pci)}
        if detail:
            attrs.update(_xid_detail(code, detail))
        row = self._row(rec, "xid", attrs, code=code, pid=pid, comm=comm)
        self.last_xid = (row, rec.line)
        if code == 79:
            self.xid79[pci] = rec.line

    def _xid_continuation(self, rec: _Rec, s: str) -> bool:
        """Xid 31 printed over three lines by some drivers: fold the MMU-fault lines in."""
        row, last = self.last_xid
        if rec.line - last > 1:
            self.last_xid = None
            return False
        a = row["attrs"]
        a["message"] = f"{a.get('message') or ''} {s}".strip()
        a.update(_xid_detail(int(row["code"]), a["message"]))
        row["line_end"] = rec.line
        row["text"] = f"{row['text']}\n{rec.raw}"
        self.last_xid = (row, rec.line)
        return True

    def _fell(self, rec: _Rec, bdf: str, body: str) -> None:
        pci = normalize_pci(bdf)
        attrs: dict[str, Any] = {"pci_bus_id": pci, "message": body, "gpu_uuid": self.pci_uuid.get(pci)}
        if pci in self.xid79:
            attrs["xid79_line"] = self.xid79[pci]
        self._row(rec, "gpu_fallen_off_bus", attrs)

    def _ml_follow(self, rec: _Rec, s: str) -> bool:
        """``NVRM: The NVIDIA GPU <bdf>`` / ``(PCI ID: …)`` / ``fallen off the bus …``: one record."""
        p = self.pending_ml
        if rec.line - p["end"] > 2 or "NVRM:" not in s:
            self._flush_ml()
            return False
        p["msgs"].append(s[s.find("NVRM:"):])
        p["end"] = rec.line
        if len(p["msgs"]) >= 3 or "fallen off the bus" in s or "not responding" in s:
            self._flush_ml()
        return True

    def _flush_ml(self) -> None:
        p, self.pending_ml = self.pending_ml, None
        if p is None:
            return
        joined = " ".join(x.removeprefix("NVRM:").strip() for x in p["msgs"])
        pci = normalize_pci(p["bdf"])
        attrs: dict[str, Any] = {"pci_bus_id": pci, "message": joined, "gpu_uuid": self.pci_uuid.get(pci)}
        pm = re.search(r"PCI ID: ([0-9a-fA-F]{4}:[0-9a-fA-F]{4})", joined)
        if pm:
            attrs["pci_id"] = pm.group(1).lower()
        if "fallen off the bus" in joined:
            attrs["at_probe"] = True
            row = self._row(p["rec"], "gpu_fallen_off_bus", attrs)
        else:
            row = self._row(p["rec"], "nvrm", attrs, count=1)
        row["line_end"] = p["end"]

    def _nvidia(self, rec: _Rec, s: str) -> bool:
        """nvidia-* modules and daemons: NVSwitch SXid, probe failures, peermem/persistenced errors."""
        m = _SXID.search(s)
        if m:
            attrs = {"message": s, "device": m.group("dev"), "sxid": int(m.group("sxid")),
                     "pci_bus_id": normalize_pci(m.group("bdf")), "detail": m.group("detail")}
            if m.group("detail").startswith(("Fatal", "Non-fatal", "Nonfatal")):
                attrs["severity"] = m.group("detail").split(",", 1)[0]
            self._row(rec, "nvrm", attrs, code=int(m.group("sxid")))
            return True
        tag = rec.tag or ""
        if not (s.startswith("nvidia") or tag.startswith("nvidia")):
            return False
        if _NVIDIA_TROUBLE.search(s):
            attrs = {"message": s}
            if tag and tag != "kernel":
                attrs["tag"] = tag
            pm = _PROBE.search(s)
            if pm:
                attrs["pci_bus_id"] = normalize_pci(pm.group("bdf"))
            self._nvrm_row(rec, s if not tag or tag == "kernel" else f"{tag}: {s}", attrs)
        return True


def _xid_detail(code: int, detail: str) -> dict[str, Any]:
    """The fields NVIDIA's catalog asks to read out of an Xid's free text."""
    out: dict[str, Any] = {}
    m = _X13_SM.search(detail)
    if m:
        out.update(gpc=int(m.group("gpc")), tpc=int(m.group("tpc")), sm=int(m.group("sm")),
                   exception=m.group("exc").strip(), exception_scope=m.group("scope").lower())
    m = _X31.search(detail)
    if m:
        out.update(channel=m.group("ch"), engine=m.group("engine"), client=m.group("client"),
                   fault_address=m.group("addr"), fault_type=m.group("ftype"), access_type=m.group("access"))
    m = _X74.search(detail)
    if m:
        out.update(link=int(m.group("link")), registers=[r.strip() for r in m.group("regs").split(",")])
    m = _X109.search(detail)
    if m:
        out.update(channel=m.group("ch"), error_string=m.group("err").strip(), info=m.group("info"))
    m = _X119.search(detail)
    if m:
        out.update(rpc_timeout_s=int(m.group("s")), gsp_function=m.group("fname"), gsp_function_id=int(m.group("fn")),
                   gpu_instance=int(m.group("inst")))
    if 144 <= code <= 150:
        m = _XNVL5.search(detail)
        if m:
            out.update(subcode=m.group("sub"), nvlink_severity=m.group("sev"), cross_containment=m.group("xc"),
                       injected=m.group("inj") != "i0", link=int(m.group("link")), intr_info=m.group("intr"),
                       error_status=m.group("status"), debug_words=m.group("dbg").split())
    m = _X154.search(detail)
    if m:
        out.update(recovery_from=m.group("fs"), recovery_from_code=m.group("f"), recovery_action=m.group("ts"),
                   recovery_action_code=m.group("t"))
    if "channel" not in out:
        m = _XCHAN.search(detail)
        if m:
            out["channel"] = m.group("ch")
    return out


# ---------------------------------------------------------------- the line loop


class _Reader:
    """Walks the lines once, tracking the multi-line containers (JSON objects, journal verbose)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.content = _Content()
        self.recognized = 0
        self.kernel_lines = 0  # lines inside a kernel-log container (decides NotThisFormat)
        self.unrec: list[tuple[int, str]] = []
        self.n_unrec = 0
        self.prev: _Rec | None = None  # last record, for continuation lines
        self.prev_ok = False
        self.json: dict | None = None  # open JSON context: {"depth", "obj", "lines", "msg_line"}
        self.verbose: dict | None = None
        self.year_refs: list[tuple[int, int, int]] = []  # (line, year, month) where a dated stamp changes month
        self.boot_offsets: list[float] = []
        self.boot_ids: set[str] = set()
        self.markers = 0

    def ok(self, kernel: bool = True) -> None:
        self.recognized += 1
        self.kernel_lines += kernel
        self.prev_ok = True

    def bad(self, n: int, line: str) -> None:
        self.n_unrec += 1
        self.prev_ok = False
        if len(self.unrec) < MAX_UNRECOGNIZED_EXAMPLES:
            self.unrec.append((n, line[:500]))

    def emit(self, rec: _Rec) -> None:
        self._note_clock(rec)
        self.prev = rec
        tag = rec.tag
        if tag is None or tag == "kernel" or tag.startswith("nvidia") or rec.bare:
            self.content.feed(rec)

    def _note_clock(self, rec: _Rec) -> None:
        st = rec.stamp
        if st is None:
            return
        ym = None
        if st[0] == "iso":
            ym = (int(st[1][:4]), int(st[1][5:7]))
            if rec.up is not None and not rec.cont:
                dt = _parse_iso(st[1])
                if dt is not None and dt.tzinfo is not None:
                    self.boot_offsets.append(dt.timestamp() - rec.up)
        elif st[0] == "usec":
            if rec.up is not None and not rec.cont:
                self.boot_offsets.append(st[1] / 1e6 - rec.up)
            if not self.year_refs or rec.line - self.year_refs[-1][0] > 1000:
                d = datetime.fromtimestamp(st[1] / 1e6, UTC)
                ym = (d.year, d.month)
        elif st[0] == "full":
            ym = (int(st[1][:4]), int(st[1][5:7]))
        elif st[0] == "ctime" and st[1][-4:].isdigit():
            mon = _MONTHS.get(st[1].split()[1][:3]) if len(st[1].split()) > 1 else None
            if mon:
                ym = (int(st[1][-4:]), mon)
        if ym and (not self.year_refs or self.year_refs[-1][1:] != ym):
            self.year_refs.append((rec.line, *ym))

    def run(self, special: list[int], offset: int = 0, prev_line: str | None = None, prev_visited: bool = True,
            final: bool = True) -> tuple[bool, bool]:
        """Visit the special lines (and the lines an open record needs); count the rest in bulk.

        ``lines`` may be one chunk of a text (:class:`Stream`): ``offset`` lines before it, the last of them
        ``prev_line`` (visited or not: ``prev_visited``). Returns whether the line after the chunk must be read
        (a record goes on) and whether the chunk's last line was visited."""
        lines, done, skipped = self.lines, -1, 0
        more = False
        for idx in special:
            if idx <= done:
                continue
            skipped += idx - done - 1
            j = idx
            while True:
                if done != j - 1 or (j == 0 and not prev_visited):
                    # the line before was skipped: it is the record a continuation belongs to
                    before = lines[j - 1] if j else prev_line
                    if before is not None:
                        self.prev, self.prev_ok = decode_line(j + offset, before.removesuffix("\r")), True
                self.feed(j + 1 + offset, lines[j].removesuffix("\r"))
                done, j = j, j + 1
                if j >= len(lines):
                    more = not final and self.needs_next(j + 1 + offset)
                    break
                if not self.needs_next(j + 1 + offset):
                    break
        skipped += len(lines) - done - 1
        self.recognized += skipped
        self.kernel_lines += skipped
        if final:
            self.finish()
        return more, done == len(lines) - 1

    def needs_next(self, n: int) -> bool:
        """Whether line ``n`` (1-based) must be read even if it is an ordinary kernel line."""
        c = self.content
        if self.json is not None or self.verbose is not None or c.hung is not None or c.pending_ml is not None:
            return True
        if c.last_nvrm_rec is not None and c.last_nvrm_rec.line == n - 1:
            return True
        return c.oom is not None and "invoker_pid" not in c.oom.attrs and n - c.oom.line < 10

    # -- one line
    def feed(self, n: int, line: str) -> None:
        if self.verbose is not None:
            if self._verbose_kv(n, line):
                return
            self._flush_verbose()
        if self.json is not None:
            if self._json_line(n, line):
                return
            self.json = None
        if not line.strip():
            self.ok(kernel=False)
            return
        c = line[0]
        if c in " \t":
            self._indented(n, line)
            return
        if c == "{":
            self._json_open(n, line)
            return
        rec = decode_line(n, line)
        if rec is not None:
            self.ok()
            self.emit(rec)
            return
        if c.isalpha():
            m = _VERBOSE_HEAD.match(line)
            if m:
                self.verbose = {"line": n, "raw": line, "kv": {}, "msg_line": None,
                                "stamp": ("full", m.group("date"), m.group("time"), m.group("tz"))}
                self.ok()
                return
        if c == "-" and _JOURNAL_MARK.match(line):
            self.markers += 1
            self.ok()
            return
        self._bare(n, line)

    def _bare(self, n: int, line: str) -> None:
        rec = _Rec(n, line, line, bare=True)
        if self.content.feed(rec):
            self.prev = rec
            self.ok()
        else:
            self.bad(n, line)

    def _indented(self, n: int, line: str) -> None:
        if self.prev is not None and self.prev_ok:
            if _KMSG_DICT.match(line) and self.prev.extra and "seq" in self.prev.extra:
                self.ok()  # /dev/kmsg dictionary lines: SUBSYSTEM=, DEVICE=
                return
            p = self.prev
            rec = _Rec(n, line, line, up=p.up, stamp=p.stamp, host=p.host, cont=True, tag=p.tag, bare=p.bare)
            self.ok()
            self.content.feed(rec)
            return
        if line.lstrip().startswith("{"):
            self._json_open(n, line.lstrip())
            return
        self._bare(n, line)

    # -- journalctl -o verbose
    def _verbose_kv(self, n: int, line: str) -> bool:
        m = _VERBOSE_KV.match(line)
        if not m:
            return False
        self.verbose["kv"][m.group("k")] = m.group("v")
        if m.group("k") == "MESSAGE":
            self.verbose["msg_line"] = n
        self.ok()
        return True

    def _flush_verbose(self) -> None:
        v, self.verbose = self.verbose, None
        if v is None:
            return
        for r in _journal_rec(v["msg_line"] or v["line"], v["kv"]):
            if r.stamp is None:
                r.stamp = v["stamp"]
            self.emit(r)

    # -- JSON: one object per line (journalctl -o json), or one key per line (dmesg -J, json-pretty)
    def _json_open(self, n: int, line: str) -> None:
        s = line.strip()
        if s == "{":
            self.json = {"depth": 1, "obj": {}, "msg_line": None, "start": n}
            self.ok(kernel=False)
            return
        try:
            obj = jsontext.loads(s)
        except (ValueError, RecursionError):
            self.bad(n, line)
            return
        recs = _json_record(n, obj)
        if recs is None:
            self.bad(n, line)
            return
        self.ok()
        for r in recs:
            self.emit(r)

    def _json_line(self, n: int, line: str) -> bool:
        j = self.json
        s = line.strip()
        if _JSON_STRUCT.match(s):
            if s.startswith("}"):
                self._json_emit()
                j["depth"] -= 1
            if s.endswith("{") or s == "[" or s == "[,":
                j["depth"] += 1
            if s.startswith("]"):
                j["depth"] -= 1
            if j["depth"] <= 0:
                self.json = None
            self.ok(kernel=False)
            return True
        m = _JSON_KV.match(s)
        if not m:
            return False
        v = m.group("v").strip()
        if v in ("[", "{"):
            j["depth"] += 1
            self.kernel_lines += m.group("k") == "dmesg"  # the dmesg -J envelope
        else:
            try:
                j["obj"][m.group("k")] = jsontext.loads(v)
            except (ValueError, RecursionError):
                return False
            if m.group("k") in ("msg", "MESSAGE"):
                j["msg_line"] = n
        self.ok(kernel=False)
        return True

    def _json_emit(self) -> None:
        j = self.json
        obj, j["obj"] = j["obj"], {}
        line = j["msg_line"]
        j["msg_line"] = None
        if not obj or line is None:
            return
        recs = _json_record(line, obj) or []
        self.kernel_lines += bool(recs)
        for r in recs:
            self.emit(r)

    def finish(self) -> None:
        self._flush_verbose()
        if self.json is not None and self.json["obj"]:
            self._json_emit()
        self.content.finish()


def _resolve_syslog_years(rows: list[dict], refs: list[tuple[int, int, int]]) -> int:
    """RFC 3164 has no year: take it from the nearest dated stamp in the same text (Dec→Jan aware)."""
    unresolved = 0
    for row in rows:
        a = row["attrs"]
        if "syslog_month" not in a or row.get("ts_local") is not None:
            continue
        if not refs:
            unresolved += 1
            continue
        ref = min(refs, key=lambda r: abs(r[0] - row["line"]))
        year = ref[1]
        if a["syslog_month"] == 12 and ref[2] == 1:
            year -= 1
        elif a["syslog_month"] == 1 and ref[2] == 12:
            year += 1
        try:
            row["ts_local"] = datetime.strptime(
                f"{year}-{a['syslog_month']:02d}-{a['syslog_day']:02d} {a['syslog_time']}",
                "%Y-%m-%d %H:%M:%S.%f" if "." in a["syslog_time"] else "%Y-%m-%d %H:%M:%S")
        except ValueError:
            unresolved += 1
    return unresolved


def _notes(reader: _Reader, rows: list[dict], unresolved_years: int) -> list[str]:
    notes = []
    if any(r.get("uptime_s") is not None and r.get("ts") is None and r.get("ts_local") is None for r in rows):
        notes.append("kernel stamps are relative to boot; boot time unknown")
    if unresolved_years:
        notes.append(f"{unresolved_years} syslog stamps have no year and the text gives none: ts_local left empty")
    if reader.boot_offsets:
        boot = min(reader.boot_offsets)
        late = sum(1 for o in reader.boot_offsets if o - boot > 2.0)
        notes.append(f"boot time from wall-clock + uptime pairs: {datetime.fromtimestamp(boot, UTC).isoformat()}")
        if late:
            notes.append(f"{late} records carry wall-clock stamps more than 2 s after boot+uptime: replayed by "
                         "journald/rsyslog, their wall clock is ingestion time; prefer uptime_s")
    if any(r["kind"] == "oom_kill" and not r["attrs"].get("complete") and not r["attrs"].get("no_killable_process")
           for r in rows):
        notes.append("an OOM-killer block has no Killed line in this text (truncated or lost)")
    return notes


def _line_numbers(text: str, offsets: list[int]) -> list[int]:
    """0-based line index of each offset (sorted input), counting newlines in C."""
    out, line, pos = [], 0, 0
    for off in offsets:
        line += text.count("\n", pos, off)
        pos = off
        out.append(line)
    return out


def _special_lines(text: str, n: int) -> list[int]:
    """Lines that need a Python-level look: not a plain container line, or holding a _HOT word."""
    offsets = [m.start() + 1 for m in _BULK_NOT_SIMPLE.finditer(text)]
    offsets += [m.start() for m in _HOT.finditer(text)]
    idx = set(_line_numbers(text, sorted(offsets)))
    if n and not _BULK_FIRST.match(text):
        idx.add(0)
    return sorted(i for i in idx if i < n)


def _bulk_year_refs(text: str) -> list[tuple[int, int, int]]:
    """(line, year, month) of every dated stamp, for the rare text that mixes them with RFC 3164 lines."""
    found = []
    for m in _BULK_YEAR.finditer(text):
        if m.group("y1"):
            found.append((m.start(), int(m.group("y1")), _MONTHS[m.group("m1")]))
        else:
            found.append((m.start(), int(m.group("y2")), int(m.group("m2"))))
    lines = _line_numbers(text, [f[0] for f in found])
    return [(ln + 1, y, mo) for ln, (_, y, mo) in zip(lines, found, strict=True)]


class Stream:
    """Parse one kernel log chunk by chunk (each chunk ends at a line end, but the last); :meth:`finish` gives
    the rows and the account. The same reading as :func:`parse`, which is one chunk: the reader's state goes
    on from chunk to chunk (a record open at a cut reads on into the next chunk). The rows are few (every
    other kernel line is counted, not kept) and stay until the end, where they are completed as a text read
    whole completes them. One difference: RFC 3164 stamps (no year) take it from the dated stamps of the
    chunks from the first such row on, not from those of earlier chunks."""

    def __init__(self, path: str = "", whole: bool = False) -> None:
        self.path = path
        self.whole = whole  # one chunk, the whole text (:func:`parse`): its dated stamps read at the end
        self.reader = _Reader([])
        self.before = 0  # lines in the chunks fed
        self.last: str | None = None  # the last line of the chunk before
        self.visited = True
        self.more = False
        self.refs: list[tuple[int, int, int]] = []  # dated stamps (line, year, month): RFC 3164 rows' years
        self.blank = True  # every line so far blank

    def feed(self, text: str) -> None:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        r = self.reader
        r.lines = lines
        special = _special_lines(text, len(lines))
        if self.more and lines and special[:1] != [0]:
            special.insert(0, 0)
        self.more, self.visited = r.run(special, self.before, self.last, self.visited, final=False)
        if self.blank and r.kernel_lines == 0:
            self.blank = not any(line.strip() for line in lines)
        if not self.whole and any("syslog_month" in row["attrs"] for row in r.content.rows):
            self.refs += [(ln + self.before, y, mo) for ln, y, mo in _bulk_year_refs(text)]
        if lines:
            self.last = lines[-1]
        self.before += len(lines)
        r.lines = []

    def finish(self, text: str | None = None) -> ParseResult:
        """The rows and the account (``text``: the whole text, when it was fed as one chunk). Raises
        NotThisFormat when no line is in a kernel-log container and no line is a kernel message."""
        reader = self.reader
        reader.finish()
        if reader.kernel_lines == 0 and not self.blank:
            raise NotThisFormat("no kernel-log line found")
        rows = reader.content.rows
        for row in rows:
            texts = row.pop("_texts", None)
            if texts:
                row["text"] = "\n".join(texts)
            row.setdefault("line_end", row["line"])
        refs = reader.year_refs
        if any("syslog_month" in r["attrs"] for r in rows):
            refs = sorted(set(refs) | set(_bulk_year_refs(text) if text is not None else self.refs))
        unresolved = _resolve_syslog_years(rows, refs)
        notes = _notes(reader, rows, unresolved)
        if len({r["attrs"].get("boot_id") for r in rows} - {None}) > 1:
            notes.append("the text spans several boots (_BOOT_ID differs); uptime_s restarts at each")
        rows.sort(key=lambda r: r["line"])
        return ParseResult.from_rows(rows, source=FORMAT, path=self.path, lines=self.before,
                                     recognized=reader.recognized, unrecognized=reader.n_unrec,
                                     unrecognized_examples=reader.unrec, notes=notes)


def parse(text: str, path: str = "", command: str | None = None) -> ParseResult:
    """Parse any kernel-log container into ``oom_kill``/``xid``/``hung_task``/… rows: :class:`Stream` fed the
    whole text.

    Raises NotThisFormat when no line is in a kernel-log container and no line is a kernel message.

    >>> parse("Nov 29 08:28:49 vm kernel: [  500.985431] NVRM: Xid (0006:00): 53, CMDre 00000000").events.select(
    ...     "kind", "code", "host", "uptime_s").row(0)
    ('xid', 53, 'vm', 500.985431)
    """
    st = Stream(path, whole=True)
    st.feed(text)
    return st.finish(text)


def sniff(head: str) -> float:
    """How sure we are that ``head`` is a kernel log: the share of lines in a kernel container.

    >>> sniff("[  399.634951] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0")
    0.95
    >>> sniff("[2025-06-01 12:00:00 TP0] Load weight end. avail mem=10.00 GB")
    0.0
    """
    kernel = syslog = content = nonblank = 0
    for line in head.split("\n", 400)[:400]:
        if not line.strip():
            continue
        if _SNIFF_JSON.search(line):  # dmesg -J envelope, journald JSON/verbose of a kernel record
            return 0.95
        nonblank += 1
        if _SNIFF_KERNEL.search(line):
            kernel += 1
        elif _SNIFF_SYSLOG.match(line):
            syslog += 1
        if _SNIFF_CONTENT.search(line):
            content += 1
    if not nonblank:
        return 0.0
    share = kernel / nonblank
    if kernel and share >= 0.5:
        return 0.95
    if kernel and share >= 0.2:
        return 0.7
    if content:
        return 0.6
    if (syslog + kernel) / nonblank >= 0.5:
        return 0.3
    return 0.0

