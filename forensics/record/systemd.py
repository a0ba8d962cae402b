"""The systemd unit ``forensics record --install-systemd`` prints (or writes with ``--write``).

Hardening follows systemd.exec(5): the recorder only reads /proc, /sys and the GPU device nodes and
writes its ring, so the file system is read-only but for the ring folder (``ReadWritePaths``), it gets
no new privileges, private /tmp, no kernel tunables or modules. It must see every process (no
``ProtectProc``/``PrivatePIDs``) and the NVIDIA devices (no ``PrivateDevices``). ``OOMScoreAdjust``
keeps it off the OOM killer's list, ``MemoryMax`` bounds it, ``Restart=always`` brings it back.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

UNIT_PATH = Path("/etc/systemd/system/forensics-record.service")


def unit_text(folder: Path, interval_s: float, executable: str | None = None) -> str:
    """The unit file for a ring in ``folder`` sampled every ``interval_s``."""
    exe = executable or _forensics_executable()
    cmd = " ".join(shlex.quote(x) for x in (*exe.split(" "), "record", "--dir", str(folder),
                                            "--interval", f"{interval_s:g}"))
    return f"""[Unit]
Description=forensics flight recorder: host, GPU and inference-process memory before an incident
After=local-fs.target
# keep recording while the inference server dies and restarts
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart={cmd}
Restart=always
RestartSec=5
OOMScoreAdjust=-900
MemoryMax=128M
CPUQuota=10%
Nice=10
IOSchedulingClass=idle
StateDirectory={_state_dir(folder)}
ReadWritePaths={folder}
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
NoNewPrivileges=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
LockPersonality=yes
RestrictAddressFamilies=AF_UNIX
SystemCallArchitectures=native
UMask=0027

[Install]
WantedBy=multi-user.target
"""


def _state_dir(folder: Path) -> str:
    """``StateDirectory=`` is relative to /var/lib; a ring elsewhere gets none (ReadWritePaths covers it)."""
    parts = folder.parts
    return "/".join(parts[3:]) if parts[:3] == ("/", "var", "lib") and len(parts) > 3 else ""


def _forensics_executable() -> str:
    exe = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if exe and exe.name == "forensics" and exe.exists():
        return str(exe)
    return f"{sys.executable} -m forensics.cli"
