"""Every mistake gets the message for what it is (issue 22, item 4): the CLI's error paths as a table,
command line → exit code → the first line of stderr, through the console entry point itself.

``{IN}`` is a small log of ours, ``{EMPTY}`` an empty file, ``{README}`` a folder holding only a README,
``{FILE}`` a regular file (a path under it can be neither created nor written, for root too), ``{DIR}``
an existing folder; the command runs in a fresh temporary folder.
"""

from __future__ import annotations

import re
import signal
import sys

import pytest

from forensics import cli

LOG = "[2026-11-29 08:27:07 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=12.00 GB\n"

ERRORS = [
    # an output that cannot be written is named as the output, not blamed on the input
    ("report {IN} -o {FILE}/out", 2, r"forensics: error: -o \S+/out: cannot write the output there \(\S+/a-file is a file, not a folder\)$"),
    ("timeline {IN} -o {FILE}/t.parquet", 2, r"forensics: error: -o \S+/t\.parquet: cannot write the output there"),
    ("collect --safe-mode -o {FILE}/b.tar.gz", 2, r"forensics: error: -o \S+/b\.tar\.gz: cannot write the output there"),
    ("collect --safe-mode -o {DIR}", 2, r"forensics: error: -o \S+: is a directory; give the bundle's file name"),
    ("fleet {IN} -o {FILE}/fleet", 2, r"forensics: error: -o \S+/fleet: cannot write the output there"),
    ("demo -o {FILE}/demo", 2, r"forensics: error: -o \S+/demo: cannot write the output there"),
    # nothing recognised is said as such, with what was read (not "none of the rules matched")
    ("report {EMPTY} -o out", 0, r"forensics: nothing in the input was recognised as evidence .*: read empty\.txt \(empty\)$"),
    ("report {README} -o out -q", 0,
     r"forensics: nothing in the input was recognised as evidence .*: read README\.md \(2 lines, none recognised\)$"),
    ("timeline {EMPTY} -o t.parquet", 0, r"forensics: nothing in the input was recognised as evidence"),
    # a bad option value is a usage error, with the valid form
    ("report {IN} --tz Mars/Base", 2, r"forensics: error: --tz 'Mars/Base': not a time zone; give an IANA name such as"),
    ("timeline {IN} -o t.parquet --tz Mars/Base", 2, r"forensics: error: --tz 'Mars/Base': not a time zone"),
    ("fleet {IN} -o fleet --tz Mars/Base", 2, r"forensics: error: --tz 'Mars/Base': not a time zone"),
    # a path named explicitly and missing stops collect before it collects anything
    ("collect --log missing/sglang.log", 2, r"forensics: error: --log missing/sglang\.log: no such file$"),
    ("collect --add 'missing/*.txt'", 2, r"forensics: error: --add missing/\*\.txt: no file matches this pattern$"),
    ("collect --log {DIR}", 2, r"forensics: error: --log \S+: the folder holds no file$"),
    ("check --model-config missing.json --cmd 'python -m sglang.launch_server --model-path m'", 3,
     r"forensics: error: --model-config missing\.json: cannot read it \(No such file or directory\)$"),
    # every command that prints progress takes -q
    ("collect -q --safe-mode --budget 10 -o b.tar.gz", 0, r"^$"),
]


def _run(argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["forensics", *argv])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.main()
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    return int(exit_.value.code or 0), err


@pytest.mark.parametrize("command, code, first_line", ERRORS, ids=[row[0] for row in ERRORS])
def test_each_mistake_gets_its_own_message(command, code, first_line, tmp_path, monkeypatch, capsys):
    import shlex

    work = tmp_path / "work"
    work.mkdir()
    (work / "server.log").write_text(LOG)
    (work / "empty.txt").write_bytes(b"")
    (work / "notes").mkdir()
    (work / "notes" / "README.md").write_text("# Incident notes\nNothing here yet.\n")
    (work / "a-file").write_text("not a folder\n")
    (work / "empty-dir").mkdir()
    places = {"{IN}": "server.log", "{EMPTY}": "empty.txt", "{README}": "notes", "{FILE}": "a-file",
              "{DIR}": "empty-dir"}
    argv = shlex.split(command)
    argv = [next((a.replace(k, v) for k, v in places.items() if k in a), a) for a in argv]
    monkeypatch.chdir(work)
    rc, err = _run(argv, monkeypatch, capsys)
    assert "Traceback" not in err
    got = err.splitlines()[0] if err else ""
    assert rc == code, err
    assert re.search(first_line, got), got


@pytest.mark.parametrize("command", ["report", "timeline", "check", "fleet", "explain", "collect", "demo", "rules"])
def test_help_reads_as_words(command, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["forensics", command, "--help"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code in (0, None)
    text = capsys.readouterr().out
    usage = text.splitlines()[0]
    arguments = text.split("Arguments:")[1].split("Options:")[0] if "Arguments:" in text else ""
    # typer's internals: {INPUT}..., INPUT <list[Path]>, [[FILE]...]...
    for shown in (usage, arguments):
        assert not re.search(r"[{}<>]|\[\[|list\[|\]\.\.\.\]", shown), shown
    assert re.search(rf" {command} \[OPTIONS\]", usage), usage
    if command in ("report", "timeline", "fleet"):
        assert usage.endswith(" INPUT...") and arguments.lstrip().startswith("INPUT...  ")
    if command == "check":
        assert usage.endswith(" [FILE...]")
