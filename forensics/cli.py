"""The `forensics` command line (DESIGN.md §3).

Exit codes: 0 done; 1 a finding at or above --fail-on; 2 usage error; 3 input unreadable or
unsafe. Errors are one line on stderr, never a traceback (FORENSICS_DEBUG=1 shows it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path

# Polars' allocator keeps freed pages for 10 s; a big input frees a parsed chunk every ~100 ms, so
# without this the pages pile up (report on 4 GB of logs peaked past 512 MB). 1 s keeps RSS flat;
# returning them at once (0) cost 25% more time in page faults. Read once, when polars first
# allocates, hence before anything imports it.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:1000,muzzy_decay_ms:0")

import typer  # noqa: E402

from . import __version__

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_INPUT = 0, 1, 2, 3
ALL_FORMATS = ("html", "md", "json", "sarif", "parquet")

class _WordsArgument(typer.core.TyperArgument):
    """A positional argument as --help shows it to a person: ``INPUT...``, ``[FILE]...``, never typer's
    ``{INPUT}...`` or ``INPUT <list[Path]>``."""

    def _words(self) -> str:
        return (self.metavar or (self.name or "ARG").upper()) + ("..." if self.nargs != 1 else "")

    def get_usage_pieces(self, ctx) -> list[str]:
        return [self._words() if self.required else f"[{self._words()}]"]

    def get_help_record(self, ctx) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        return None if record is None else (self._words() if self.required else f"[{self._words()}]", record[1])


class _Commands(typer.core.TyperGroup):
    """The command group; every command's positional arguments read as words in --help."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            for param in command.params:
                if type(param) is typer.core.TyperArgument:
                    param.__class__ = _WordsArgument


app = typer.Typer(
    name="forensics",
    cls=_Commands,
    help=(
        "Post-incident forensics for LLM inference hosts (SGLang, vLLM).\n\n"
        "Run `forensics collect` on the host right after the incident (every command it runs is "
        "bounded by a timeout), then `forensics report BUNDLE` anywhere, offline, to get the root "
        "cause, the evidence as file:line and corrected launch flags with the arithmetic shown. A log, a "
        "fragment or a ticket's paste is enough to start with; the report says what it could not see.\n\n"
        "Before a launch, `forensics check launch.sh` runs the same arithmetic; `forensics fleet DIR` "
        "analyses many incidents into one dataset."
    ),
    add_completion=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class Fail(Exception):
    """A one-line error and its exit code."""

    def __init__(self, message: str, code: int = EXIT_INPUT):
        super().__init__(message)
        self.code = code


def _say(msg: str) -> None:
    from .progress import printable

    typer.echo(printable(msg), err=True)  # names from the input are in it: no control character reaches the terminal


def _version_cb(value: bool) -> None:
    if value:
        from parsers import bulkscan

        typer.echo(f"forensics {__version__}")
        # the first question when a big input parses slowly: is the compiled scanner in use?
        typer.echo("native scanner: " + ("in use" if bulkscan.available() else f"not in use ({bulkscan.why_not or 'FORENSICS_NATIVE=0'})"))
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_cb, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    pass


def _parse_formats(spec: str) -> set[str]:
    fmts = {s.strip().lower() for s in spec.split(",") if s.strip()}
    aliases = {"markdown": "md", "htm": "html", "pq": "parquet"}
    fmts = {aliases.get(f, f) for f in fmts}
    bad = fmts - set(ALL_FORMATS)
    if bad or not fmts:
        raise Fail(f"--format: unknown format(s) {', '.join(sorted(bad)) or '(none)'}; choose from {','.join(ALL_FORMATS)}",
                   EXIT_USAGE)
    return fmts


def _severity_threshold(name: str | None) -> str | None:
    from .model import SEVERITIES

    if name is None:
        return None
    n = name.lower()
    if n in ("none", "never"):
        return None
    if n not in SEVERITIES:
        raise Fail(f"--fail-on: unknown severity {name!r}; choose from {', '.join(SEVERITIES)} or none", EXIT_USAGE)
    return n


def _zone_option(tz: str | None) -> str | None:
    """``--tz`` checked before any input is read: a zone that does not exist is a usage error."""
    import zoneinfo

    if tz is None:
        return None
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise Fail(f"--tz {tz!r}: not a time zone; give an IANA name such as Asia/Shanghai, Europe/Berlin or UTC",
                   EXIT_USAGE) from None
    return tz


def _writable_folder(option: str, folder: Path) -> None:
    """Fail now, naming the output, when ``folder`` cannot be created or written (not after the analysis).

    A probe that leaves nothing behind: the folders it had to create are removed again, so a run that
    then fails on its input leaves no empty output folder.
    """
    folder = folder.absolute()
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    blocker = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise Fail(f"{option}: cannot write the output there ({blocker} is a file, not a folder)", EXIT_USAGE)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise Fail(f"{option}: cannot write the output there ({e.strerror or type(e).__name__})", EXIT_USAGE) from None
    finally:
        for p in created:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()


def _output_error(option: str, e: OSError) -> Fail:
    where = f" {e.filename}" if e.filename else ""
    return Fail(f"{option}: could not write{where} ({e.strerror or type(e).__name__})", EXIT_USAGE)


def _nothing_recognised(coverage: list[dict]) -> str | None:
    """The one line to say when no file of the input held anything recognised as evidence, else None."""
    from .report import unrecognised_input

    read = unrecognised_input(coverage)
    if read is None:
        return None
    listed = "; ".join(read[:5]) + (f"; and {len(read) - 5} more" if len(read) > 5 else "")
    return f"nothing in the input was recognised as evidence (a log, a launch command, a host snapshot): read {listed}"


def _host_overrides(specs: list[str], inputs: list[Path]) -> tuple[list[Path], dict[str, str]]:
    """``--host NAME=PATH`` values as {path: name}; a PATH not among the INPUTs is read too."""
    from forensics.timeline.hosts import parse_host_specs

    try:
        hosts = parse_host_specs(specs)
    except ValueError as e:
        raise Fail(str(e), EXIT_USAGE) from None
    given = {str(p).rstrip("/") for p in inputs}
    return [*inputs, *(Path(p) for p in hosts if p not in given)], hosts


def _write_report(tl, doc, out: str, formats: set[str]) -> list[Path]:
    from .report import write_outputs

    if out == "-":
        if len(formats) != 1:
            raise Fail("-o -: choose exactly one --format to write to stdout", EXIT_USAGE)
        with tempfile.TemporaryDirectory(prefix="forensics-") as tmp:
            paths = write_outputs(doc, tl, Path(tmp), formats)
            for p in paths:
                sys.stdout.buffer.write(p.read_bytes())
            sys.stdout.flush()
        return []
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise Fail(f"-o {out}: exists and is not a directory", EXIT_USAGE)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_outputs(doc, tl, out_dir, formats)


def _exit_for(doc: dict, fail_on: str | None) -> int:
    from .model import SEVERITY_RANK

    if fail_on is None:
        return EXIT_OK
    worst = min((SEVERITY_RANK[f["severity"]] for f in doc.get("findings", [])), default=None)
    return EXIT_FINDING if worst is not None and worst <= SEVERITY_RANK[fail_on] else EXIT_OK


def _headline(doc: dict) -> str:
    root = doc.get("root_cause")
    for f in doc.get("findings", []):
        if f["rule_id"] == root:
            return f"root cause: [{f['severity']}] {f['title']} ({f['rule_id']})"
    n = len(doc.get("findings", []))
    return f"no root cause identified; {n} finding(s)" if n else "no findings"


@app.command()
def report(
    inputs: list[Path] = typer.Argument(..., metavar="INPUT",
                                        help="Bundles (.tar, .tar.gz, .tgz, .tar.zst), directories or loose files."),
    output: str = typer.Option("forensics-report", "-o", "--output", metavar="DIR",
                               help="Folder for the outputs ('-' writes the one chosen --format to stdout)."),
    formats: str = typer.Option(",".join(ALL_FORMATS), "--format", metavar="LIST",
                                help="Comma-separated: html, md, json, sarif, parquet."),
    fail_on: str = typer.Option(None, "--fail-on", metavar="SEVERITY",
                                help="Exit 1 when a finding is at or above this severity (critical, high, medium, low, info)."),
    tz: str = typer.Option(None, "--tz", metavar="ZONE",
                           help="IANA zone of the host's log stamps when the input does not record it (e.g. Asia/Shanghai)."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress on stderr."),
    host: list[str] = typer.Option([], "--host", metavar="NAME=PATH",
                                   help="The host an input is (repeatable); one input per host of a multi-node incident."),
) -> None:
    """Analyse a bundle offline and write the postmortem.

    Writes report.html, summary.md, findings.json, findings.sarif and timeline.parquet into DIR:
    the root cause, evidence as file:line, corrected launch flags with the arithmetic, cleanup steps.
    """
    fmts = _parse_formats(formats)
    threshold = _severity_threshold(fail_on)
    tz = _zone_option(tz)
    if output == "-" and len(fmts) != 1:
        raise Fail("-o -: choose exactly one --format to write to stdout", EXIT_USAGE)
    if output != "-":
        if Path(output).exists() and not Path(output).is_dir():
            raise Fail(f"-o {output}: exists and is not a directory", EXIT_USAGE)
        _writable_folder(f"-o {output}", Path(output))
    # a big input's timeline.parquet is streamed into a temporary folder next to the output
    inputs, hosts = _host_overrides(host, inputs)
    from .analysis import analyse

    tl, doc = analyse(inputs, tz, quiet, None if output == "-" else Path(output).absolute().parent, hosts)
    try:
        written = _write_report(tl, doc, output, fmts)
    except OSError as e:
        raise _output_error(f"-o {output}", e) from None
    empty = _nothing_recognised(doc.get("coverage") or [])
    if empty:
        _say(f"forensics: {empty}")  # said even with -q: it is the answer, not progress
    if not quiet:
        if not empty:
            _say(_headline(doc))
        for p in written:
            _say(f"wrote {p}")
    raise typer.Exit(_exit_for(doc, threshold))


@app.command()
def timeline(
    inputs: list[Path] = typer.Argument(..., metavar="INPUT", help="Bundles, directories or loose files."),
    output: str = typer.Option(..., "-o", "--output", metavar="FILE.parquet", help="Parquet file to write ('-' for stdout)."),
    tz: str = typer.Option(None, "--tz", metavar="ZONE", help="IANA zone of naive host-local stamps."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress on stderr."),
    host: list[str] = typer.Option([], "--host", metavar="NAME=PATH", help="The host an input is (repeatable)."),
) -> None:
    """Write only the timeline (zstd Parquet).

    One row per event, each with its file and 1-based line, timestamps in UTC.
    """
    from .progress import for_stderr
    from .timeline import build_timeline, write_parquet

    tz = _zone_option(tz)
    spill = None if output == "-" else Path(output).absolute().parent
    if output != "-":
        if Path(output).is_dir():
            raise Fail(f"-o {output}: is a directory; give a file name", EXIT_USAGE)
        _writable_folder(f"-o {output}", Path(output).absolute().parent)
    progress = for_stderr(quiet)
    inputs, hosts = _host_overrides(host, inputs)
    try:
        tl = build_timeline(inputs, tz=tz, progress=progress, spill_dir=spill, hosts=hosts)
    finally:
        if progress is not None:
            progress.close()
    if output == "-":
        with tempfile.TemporaryDirectory(prefix="forensics-") as tmp:
            p = Path(tmp) / "timeline.parquet"
            write_parquet(tl, p)
            sys.stdout.buffer.write(p.read_bytes())
        return
    out = Path(output)
    try:
        write_parquet(tl, out)
    except OSError as e:
        raise _output_error(f"-o {output}", e) from None
    empty = _nothing_recognised(tl.coverage)
    if empty:
        _say(f"forensics: {empty}")
    if not quiet:
        unrec = sum(c["unrecognized"] for c in tl.coverage)
        _say(f"wrote {out}: {tl.n_events:,} events from {len(tl.coverage)} file(s), {unrec:,} unrecognised line(s)")


@app.command()
def collect(
    output: str = typer.Option(None, "-o", "--output", metavar="PATH",
                               help="Bundle to write (.tar.gz default; .tar, .tar.zst by extension; '-' for stdout)."),
    log: list[str] = typer.Option([], "--log", metavar="PATH", help="Rank logs to add: files, folders or globs (repeatable)."),
    add: list[str] = typer.Option([], "--add", metavar="PATH", help="Any other file to attach: a pasted transcript, a launch script (repeatable)."),
    snapshots: int = typer.Option(1, "--snapshots", min=1, max=1000, metavar="N", help="Take free/meminfo/nvidia-smi/ps this many times."),
    interval: float = typer.Option(0.0, "--interval", min=0.0, metavar="S", help="Seconds between snapshots."),
    timeout: float = typer.Option(10.0, "--timeout", min=0.1, metavar="S", help="Per-command timeout; a command past it is killed (its whole process group)."),
    budget: float = typer.Option(120.0, "--budget", min=1.0, metavar="S", help="Whole-run budget; what was collected by then is written."),
    no_redact: bool = typer.Option(False, "--no-redact", help="Keep tokens, keys and passwords (redacted by default)."),
    safe_mode: bool = typer.Option(False, "--safe-mode", help="Touch nothing that talks to the GPU driver (no nvidia-smi, no fuser on /dev/nvidia*)."),
    obfuscate: bool = typer.Option(False, "--obfuscate", help="Replace host names and IPs consistently; the mapping is written next to the bundle, not in it."),
    max_log_bytes: int = typer.Option(512 * 1024**2, "--max-log-bytes", min=1024, metavar="N", help="Keep at most the last N bytes of each log."),
    tag: str = typer.Option(None, "--tag", metavar="TAG",
                            help="Incident tag shared by every node's bundle (in the bundle's name and manifest)."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress on stderr."),
    record_dir: Path = typer.Option(Path("/var/lib/forensics/record"), "--record-dir", metavar="DIR",
                                    help="The flight recorder's ring (forensics record --dir)."),
    record_since: float = typer.Option(3600.0, "--record-since", min=0.0, metavar="S",
                                       help="Take the recorder's last S seconds (default one hour)."),
) -> None:
    """Gather the evidence on this host into one bundle.

    Rank logs, launch argv, versions, free/meminfo, nvidia-smi, the kernel log and process states.
    Every command is bounded by --timeout and the run by --budget; what could not be read is
    recorded in the manifest. Read-only: it never kills or changes anything.
    """
    from .collect import CollectOptions, check_tag, unmatched
    from .collect import collect as run_collect

    if tag is not None:
        try:
            check_tag(tag)
        except ValueError as e:
            raise Fail(str(e), EXIT_USAGE) from None
    # a path the user named and that is not there is a mistake to fix before the run, not a gap
    for option, patterns in (("--log", log), ("--add", add)):
        for pattern in patterns:
            why = unmatched(pattern)
            if why:
                raise Fail(f"{option} {pattern}: {why}", EXIT_USAGE)
    if output and output != "-":
        out = Path(output)
        if out.is_dir():
            raise Fail(f"-o {output}: is a directory; give the bundle's file name (e.g. {out / 'incident.tar.gz'})",
                       EXIT_USAGE)
        _writable_folder(f"-o {output}", out.absolute().parent)
    elif output is None:
        _writable_folder("the current folder (the default -o)", Path.cwd())

    opts = CollectOptions(
        output=Path(output) if output and output != "-" else (Path("-") if output == "-" else None),
        logs=list(log), adds=list(add), snapshots=snapshots, interval_s=interval, timeout_s=timeout,
        budget_s=budget, redact=not no_redact, safe_mode=safe_mode, obfuscate=obfuscate,
        max_log_bytes=max_log_bytes, progress=None if quiet else _say, tag=tag, record_dir=record_dir,
        record_since_s=record_since,
    )
    try:
        path = run_collect(opts)
    except OSError as e:
        raise _output_error(f"-o {output}" if output else "the bundle (in the current folder)", e) from None
    if str(path) != "-" and not quiet:
        _say(f"wrote {path}")


@app.command()
def record(
    folder: Path = typer.Option(None, "--dir", metavar="DIR",
                                help="The ring's folder (default /var/lib/forensics/record)."),
    interval: float = typer.Option(5.0, "--interval", min=0.2, metavar="S", help="Seconds between samples."),
    max_mib: int = typer.Option(64, "--max-mib", min=1, metavar="N", help="Cap on the ring's size on disk (MiB)."),
    max_hours: float = typer.Option(24.0, "--max-hours", min=0.01, metavar="H", help="Cap on the ring's age (hours)."),
    duration: float = typer.Option(None, "--duration", min=0.1, metavar="S", help="Stop after S seconds (default: run until stopped)."),
    gpu: str = typer.Option("auto", "--gpu", metavar="SOURCE", help="auto (NVML, else nvidia-smi), nvml, smi or none."),
    install_systemd: bool = typer.Option(False, "--install-systemd", help="Print a hardened systemd unit for the recorder."),
    write: bool = typer.Option(False, "--write", help="With --install-systemd: write it to /etc/systemd/system."),
    status: bool = typer.Option(False, "--status", help="Say what the ring holds, since when, and how full it is."),
) -> None:
    """Record host, GPU and inference-process memory into a bounded ring, for the minutes before a crash.

    Every --interval it samples /proc/meminfo, the cgroup's memory, /dev/shm, each GPU's memory and
    compute processes (NVML, else nvidia-smi, each under a timeout) and the RSS of SGLang/vLLM
    processes. The ring is capped by --max-mib and --max-hours, oldest first; `collect` bundles the
    last hour and `report` reads it. See docs/record.md for systemd, Kubernetes and Slurm.
    """
    from .record import DEFAULT_DIR, RecordOptions, run, status_text
    from .record.systemd import UNIT_PATH, unit_text

    ring = folder or DEFAULT_DIR
    if gpu not in ("auto", "nvml", "smi", "none"):
        raise Fail(f"--gpu {gpu!r}: one of auto, nvml, smi, none", EXIT_USAGE)
    if write and not install_systemd:
        raise Fail("--write goes with --install-systemd", EXIT_USAGE)
    if install_systemd:
        text = unit_text(ring.absolute(), interval)
        if not write:
            typer.echo(text, nl=False)
            return
        try:
            UNIT_PATH.write_text(text)
        except OSError as e:
            raise Fail(f"cannot write {UNIT_PATH}: {e.strerror or e} (run as root, or without --write)") from None
        _say(f"wrote {UNIT_PATH}; now: systemctl daemon-reload && systemctl enable --now {UNIT_PATH.name}")
        return
    if status:
        typer.echo(status_text(ring, max_bytes=max_mib * 2**20, max_age_s=max_hours * 3600))
        return
    try:
        ring.mkdir(parents=True, exist_ok=True)
        probe = ring / ".forensics-record-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise Fail(f"--dir {ring}: cannot write there ({e.strerror or e}); choose another with --dir", EXIT_USAGE) from None
    opts = RecordOptions(folder=ring, interval_s=interval, max_bytes=max_mib * 2**20, max_age_s=max_hours * 3600,
                         duration_s=duration, gpu=gpu, progress=_say)
    rec = run(opts)
    _say(f"record: stopped after {rec.samples} samples; ring in {ring}")


def _size_option(name: str, value: str | None) -> int | None:
    from parsers.units import parse_cli_size

    if value is None:
        return None
    size = parse_cli_size(value)
    if not size:
        raise Fail(f"{name} {value!r}: not a size (e.g. 449GiB, 480G, 97887MiB or bytes)", EXIT_USAGE)
    return size


@app.command()
def check(
    files: list[str] = typer.Argument(None, metavar="FILE",
                                      help="Launch script, compose file, Kubernetes manifest or `kubectl describe "
                                           "pod`, Slurm script, engine config YAML, or - for stdin; beside it, the "
                                           "files that size or bound its pools (an LMCache YAML, memory.max, free -g)."),
    cmd: str = typer.Option(None, "--cmd", metavar="TEXT", help="The launch command as one string."),
    host_memory: str = typer.Option(None, "--host-memory", metavar="SIZE", help="Host RAM (449GiB, 480G, bytes)."),
    gpus: int = typer.Option(None, "--gpus", min=1, max=1024, metavar="N", help="GPUs on the host."),
    gpu_memory: str = typer.Option(None, "--gpu-memory", metavar="SIZE", help="Memory of one GPU (97887MiB, 80GiB)."),
    engine_version: str = typer.Option(None, "--engine-version", metavar="V", help="SGLang version (0.5.6)."),
    model_config: str = typer.Option(None, "--model-config", metavar="PATH",
                                     help="The model's config.json (default: the model path's, when local)."),
    fmt: str = typer.Option("text", "--format", metavar="text|json", help="text (default) or json (findings.json)."),
    fail_on: str = typer.Option("high", "--fail-on", metavar="SEVERITY",
                                help="Exit 1 when a finding is at or above this severity (default high; none)."),
) -> None:
    """Check a launch configuration against the host before starting it.

    With --host-memory/--gpus/--gpu-memory/--engine-version it runs offline on those facts (plus limits
    in the file); without them it reads this host (free, the cgroup limit, nvidia-smi, the installed
    SGLang) with bounded commands. Prints each problem with the corrected flag and its arithmetic,
    then the corrected command.
    """
    from forensics.report.findings import dumps_document, to_document

    from .check import CheckError, CheckOptions, render_text, run_check

    if fmt not in ("text", "json"):
        raise Fail(f"--format: {fmt!r}; choose text or json", EXIT_USAGE)
    threshold = _severity_threshold(fail_on)
    files = list(files or [])
    if files.count("-") > 1:
        raise Fail("- (stdin) can be given once", EXIT_USAGE)
    opts = CheckOptions(
        files=files, cmd=cmd, host_memory=_size_option("--host-memory", host_memory), gpus=gpus,
        gpu_memory=_size_option("--gpu-memory", gpu_memory), engine_version=engine_version, model_config=model_config,
        stdin=sys.stdin.read() if "-" in files else None,
    )
    try:
        res = run_check(opts)
    except CheckError as e:
        raise Fail(str(e), e.code) from None
    doc = to_document(res.findings, res.root, res.timeline)
    if fmt == "json":
        typer.echo(dumps_document(doc), nl=False)
    else:
        typer.echo(render_text(res, threshold), nl=False)
    raise typer.Exit(_exit_for(doc, threshold))


@app.command()
def rules() -> None:
    """List the rule catalog (id, severity, category, title)."""
    from .rules import format_rules_table

    typer.echo(format_rules_table())


@app.command()
def explain(rule_id: str = typer.Argument(..., metavar="RULE_ID", help="A rule id from `forensics rules`.")) -> None:
    """Show one rule: what it means, how we know, what to do."""
    from .rules import format_rule

    try:
        typer.echo(format_rule(rule_id))
    except KeyError:
        raise Fail(f"unknown rule {rule_id!r}; `forensics rules` lists them", EXIT_USAGE) from None


@app.command()
def demo(
    output: str = typer.Option("forensics-demo", "-o", "--output", metavar="DIR", help="Folder for the report."),
) -> None:
    """Report on the example incident shipped with the package."""
    from .resources import example_bundle

    if Path(output).exists() and not Path(output).is_dir():
        raise Fail(f"-o {output}: exists and is not a directory", EXIT_USAGE)
    _writable_folder(f"-o {output}", Path(output))
    bundle = example_bundle()
    from .analysis import analyse

    tl, doc = analyse([bundle], None, quiet=True)
    try:
        written = _write_report(tl, doc, output, set(ALL_FORMATS))
    except OSError as e:
        raise _output_error(f"-o {output}", e) from None
    _say(_headline(doc))
    out = Path(output).resolve()
    typer.echo(f"Demo report of the seed incident written to {out}")
    for p in written:
        typer.echo(f"  {p.name}")
    typer.echo(f"Open {out / 'report.html'} in a browser.")


@app.command()
def fleet(
    inputs: list[str] = typer.Argument(..., metavar="INPUT",
                                       help="Bundles, folders of bundles, evidence folders or globs (quote them)."),
    output: Path = typer.Option(..., "-o", "--output", metavar="DIR",
                                help="Fleet folder: incidents/<id>/, findings/ (Parquet), incidents.parquet, index.html."),
    workers: int = typer.Option(None, "--workers", min=1, metavar="N", help="Processes (default: the cores)."),
    ray: str = typer.Option(None, "--ray", metavar="ADDRESS",
                            help="Run the incidents as Ray tasks: 'auto', 'local' (start Ray here) or the cluster "
                                 "address; inputs and DIR must be paths every node sees."),
    since: str = typer.Option(None, "--since", metavar="DATE",
                              help="Only inputs modified on or after this day (YYYY-MM-DD, UTC)."),
    formats: str = typer.Option(",".join(ALL_FORMATS), "--format", metavar="LIST",
                                help="What each incident's report folder holds, as for `report`."),
    tz: str = typer.Option(None, "--tz", metavar="ZONE", help="IANA zone of naive host-local stamps."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress on stderr."),
) -> None:
    """Analyse many incidents at once into a dataset and an overview page.

    Each incident (one input, or the bundles whose manifest shares a `tag`) goes through exactly
    the analysis `report` runs and gets its report in DIR/incidents/<id>/. DIR/findings/ (Parquet,
    hive-partitioned by date=YYYY-MM-DD) holds one row per finding, DIR/incidents.parquet one row per
    incident, failed inputs included with their error; DIR/index.html shows what recurs. Rerunning over
    the same inputs adds nothing (keyed by sha256); new inputs append. Schema: docs/fleet.md.

    Exit codes: 0 every incident of this run was analysed; 2 usage error (an INPUT that names
    nothing, a bad option, DIR in use by another fleet run); 3 at least one input of this run could
    not be analysed (unsafe, corrupt, unreadable): it is recorded with its error in incidents.parquet
    and the others were analysed.
    """
    from datetime import date

    from .fleet import FleetUsageError, run_fleet

    fmts = _parse_formats(formats)
    day = None
    if since:
        try:
            day = date.fromisoformat(since)
        except ValueError:
            raise Fail(f"--since {since!r}: not a day (YYYY-MM-DD)", EXIT_USAGE) from None
    tz = _zone_option(tz)
    if output.exists() and not output.is_dir():
        raise Fail(f"-o {output}: exists and is not a directory", EXIT_USAGE)
    _writable_folder(f"-o {output}", output)
    try:
        result = run_fleet(inputs, output, workers=workers, ray=ray, since=day, tz=tz,
                           formats=tuple(f for f in ALL_FORMATS if f in fmts), say=None if quiet else _say)
    except FleetUsageError as e:
        raise Fail(str(e), EXIT_USAGE) from None
    if not quiet:
        _say(f"{len(result.analysed)} incident(s) analysed in {result.seconds:.1f} s, {len(result.failed)} failed, "
             f"{result.skipped} already in the dataset; {result.total} in {output / 'incidents.parquet'}")
        _say(f"wrote {output / 'index.html'}")
    raise typer.Exit(EXIT_INPUT if result.failed else EXIT_OK)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every ``finally`` (spool and spill folders) runs."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def main() -> None:
    """Console entry point: maps every failure to one line and an exit code."""
    from .inputs import InputError

    # `timeout`, systemd and kubectl stop a run with SIGTERM: clean up as for Ctrl-C instead of leaving
    # gigabytes of spooled archive members behind
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        # without standalone mode click returns the code of a typer.Exit raised in a command
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else EXIT_OK)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Fail as e:
        _say(f"forensics: error: {e}")
        sys.exit(e.code)
    except InputError as e:
        _say(f"forensics: error: {e}")
        sys.exit(EXIT_INPUT)
    except (typer.Abort, KeyboardInterrupt):
        _say("forensics: interrupted")
        sys.exit(130)
    except _Terminated:
        _say("forensics: terminated")
        sys.exit(143)
    except Exception as e:  # click's usage errors (typer vendors click) and anything unexpected
        format_message = getattr(e, "format_message", None)
        if callable(format_message) and isinstance(getattr(e, "exit_code", None), int):
            _say(f"forensics: usage error: {format_message()}")
            ctx = getattr(e, "ctx", None)
            if ctx is not None:
                _say(f"Try '{ctx.command_path} --help'.")
            sys.exit(EXIT_USAGE)
        if os.environ.get("FORENSICS_DEBUG"):
            raise
        _say(f"forensics: error: could not process the input: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
             " (FORENSICS_DEBUG=1 shows the traceback)")
        sys.exit(EXIT_INPUT)


if __name__ == "__main__":
    main()
