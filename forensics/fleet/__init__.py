"""`forensics fleet`: many incidents at once, each through exactly the analysis `report` runs.

    inputs (paths, folders of bundles, globs) ─► identify (sha256, manifest tag) ─► incidents
      ─► per incident, in a process pool or as Ray tasks: analysis.analyse → report folder + findings partition
      ─► incidents.parquet (driver) ─► index.html

The per-incident task (:func:`analyse_incident`) is a plain function of picklable arguments that
writes only under ``DIR/incidents/<id>/`` and its own ``DIR/findings/date=…/<id>.parquet`` and returns
the incident's row, so the same task runs in a ``concurrent.futures`` pool or on a Ray cluster (whose
workers must see the input paths and DIR). Nothing here schedules: the pool or Ray does.

Incidents are keyed by their inputs' sha256: a rerun over the same inputs analyses nothing again and
adds no row; new inputs append. A bundle whose manifest carries a ``tag`` joins every other bundle of
that tag in one incident; any other input is an incident of its own.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from forensics.inputs import ARCHIVE_SUFFIXES, is_archive_name

#: what an incident folder holds by default: everything `report` writes
DEFAULT_FORMATS = ("html", "md", "json", "sarif", "parquet")
_MANIFEST_MAX = 4 << 20


class FleetUsageError(Exception):
    """An INPUT that names nothing (a typo, a glob without matches): a usage error, before any work."""


# ---------------------------------------------------------------------------------------------
# Inputs → incidents
# ---------------------------------------------------------------------------------------------


def _is_bundle_dir(p: Path) -> bool:
    return (p / "manifest.json").is_file()


def expand_inputs(args: Iterable[str]) -> list[Path]:
    """Each INPUT as the evidence sets it names, in a stable order, without duplicates.

    A glob expands to its matches. A folder with a ``manifest.json`` is one unpacked bundle; a folder
    whose files are all archives is a folder of bundles (each archive, and each unpacked bundle folder
    beside them, is an input); any other folder is one evidence folder. A file is one input.
    """
    out: dict[str, Path] = {}

    def add(p: Path) -> None:
        out.setdefault(str(p.absolute()), p.absolute())

    for arg in args:
        matches = sorted(glob.glob(arg, recursive=True)) if glob.has_magic(arg) else [arg]
        if not matches:
            raise FleetUsageError(f"{arg}: no file matches")
        for m in matches:
            p = Path(m)
            if not p.exists():
                raise FleetUsageError(f"{m}: no such file or folder")
            if p.is_dir() and not _is_bundle_dir(p):
                kids = [k for k in sorted(p.iterdir()) if not k.name.startswith(".")]
                files = [k for k in kids if k.is_file()]
                if files and all(is_archive_name(k) for k in files):
                    for k in kids:
                        if k.is_file() or _is_bundle_dir(k):
                            add(k)
                    continue
            add(p)
    return list(out.values())


class _HashingReader(io.RawIOBase):
    """Hashes every byte read through it, so one pass over an archive gives its sha256 and its manifest."""

    def __init__(self, raw: io.BufferedIOBase):
        self.raw, self.sha = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self.raw.read(len(b))
        self.sha.update(data)
        b[: len(data)] = data
        return len(data)

    def drain(self) -> str:
        while chunk := self.raw.read(1 << 20):
            self.sha.update(chunk)
        return self.sha.hexdigest()


def _manifest_tag(data: bytes) -> str | None:
    try:
        m = json.loads(data)
    except ValueError:
        return None
    tag = m.get("tag") if isinstance(m, dict) else None
    return str(tag).strip() or None if tag not in (None, "") else None


def _is_manifest_member(name: str) -> bool:
    parts = [s for s in name.replace("\\", "/").split("/") if s not in ("", ".")]
    return bool(parts) and parts[-1] == "manifest.json" and len(parts) <= 2


def _archive_identity(path: Path) -> tuple[str, str | None]:
    """sha256 of the archive's bytes and its manifest's ``tag``, in one read. An archive that cannot be
    read still gets its hash (the analysis reports what is wrong with it)."""
    tag = None
    with open(path, "rb") as raw:
        if path.name.lower().endswith(".zip"):
            sha = hashlib.sha256()
            while chunk := raw.read(1 << 20):
                sha.update(chunk)
            try:
                with zipfile.ZipFile(path) as z:
                    for info in z.infolist():
                        if _is_manifest_member(info.filename) and info.file_size <= _MANIFEST_MAX:
                            tag = _manifest_tag(z.read(info))
                            break
            except (zipfile.BadZipFile, OSError, ValueError, RuntimeError):
                pass
            return sha.hexdigest(), tag
        reader = _HashingReader(raw)
        try:
            buffered = io.BufferedReader(reader, buffer_size=1 << 20)
            if path.name.lower().endswith((".tar.zst", ".tar.zstd", ".tzst")):
                import zstandard

                stream = zstandard.ZstdDecompressor().stream_reader(buffered, read_across_frames=True)
                tf = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 - closed by the with below
            else:
                tf = tarfile.open(fileobj=buffered, mode="r|*")  # noqa: SIM115 - as above
            with tf:
                for member in tf:
                    if member.isfile() and _is_manifest_member(member.name) and member.size <= _MANIFEST_MAX:
                        f = tf.extractfile(member)
                        tag = _manifest_tag(f.read()) if f else None
                        break
        except Exception:  # noqa: BLE001 - any unreadable archive: hash it, let the analysis say why
            pass
        return reader.drain(), tag


def _folder_identity(path: Path) -> tuple[str, str | None]:
    """A folder's sha256: over its files' relative paths and contents, in path order."""
    sha = hashlib.sha256()
    tag = None
    for f in sorted(q for q in path.rglob("*") if q.is_file()):
        rel = f.relative_to(path).as_posix()
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        sha.update(f"{rel}\0{h.hexdigest()}\n".encode())
        if rel == "manifest.json" and f.stat().st_size <= _MANIFEST_MAX:
            tag = _manifest_tag(f.read_bytes())
    return sha.hexdigest(), tag


def identify(path: str) -> dict[str, Any]:
    """``{"path", "sha256", "tag", "error"}`` of one input (runs in the pool: it reads every byte)."""
    p = Path(path)
    try:
        if p.is_dir():
            sha, tag = _folder_identity(p)
        elif is_archive_name(p):
            sha, tag = _archive_identity(p)
        else:
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            sha, tag = h.hexdigest(), None
        return {"path": str(p), "sha256": sha, "tag": tag, "error": None}
    except OSError as e:
        return {"path": str(p), "sha256": None, "tag": None, "error": f"{p}: {e.strerror or e}"}


_SLUG_RE = re.compile(r"[^A-Za-z0-9._-]+")


def _stem(path: str) -> str:
    name = Path(path).name
    for suf in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suf):
            return name[: -len(suf)]
    return name


def _slug(text: str, limit: int = 48) -> str:
    s = _SLUG_RE.sub("-", text).strip("-.") or "input"
    return s[:limit].rstrip("-.")


@dataclass
class Incident:
    """One incident to analyse: its inputs (absolute paths), their sha256 and the tag that joined them."""

    id: str
    inputs: list[str]
    input_sha256: list[str | None]
    tag: str | None = None
    error: str | None = None  # an input that could not even be read for its hash
    mtime: float = 0.0

    def spec(self) -> dict[str, Any]:
        return {"incident_id": self.id, "inputs": self.inputs, "input_sha256": self.input_sha256,
                "tag": self.tag, "error": self.error, "mtime": self.mtime}


def group_incidents(identities: list[dict[str, Any]]) -> list[Incident]:
    """Inputs that share a tag form one incident; every other input is one of its own.

    The id is readable and stable: the input's name (or the tag) and a hash of the inputs' sha256.

    >>> ids = [{"path": "/b/a.tar.gz", "sha256": "1" * 64, "tag": None, "error": None},
    ...        {"path": "/b/h1.tgz", "sha256": "2" * 64, "tag": "inc-9", "error": None},
    ...        {"path": "/b/h2.tgz", "sha256": "3" * 64, "tag": "inc-9", "error": None}]
    >>> [(i.id.split("-")[0], len(i.inputs)) for i in group_incidents(ids)]
    [('a', 1), ('inc', 2)]
    """
    by_tag: dict[str, list[dict[str, Any]]] = {}
    single: list[list[dict[str, Any]]] = []
    for ident in identities:
        if ident.get("tag"):
            by_tag.setdefault(ident["tag"], []).append(ident)
        else:
            single.append([ident])
    out = []
    for members in single + list(by_tag.values()):
        members = sorted(members, key=lambda m: m["path"])
        tag = members[0].get("tag")
        keys = sorted(m["sha256"] or f"path:{m['path']}" for m in members)
        digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
        name = _slug(tag) if tag else _slug(_stem(members[0]["path"]))
        errors = [m["error"] for m in members if m.get("error")]
        mtimes = [os.stat(m["path"]).st_mtime for m in members if not m.get("error") and os.path.exists(m["path"])]
        out.append(Incident(id=f"{name}-{digest}", inputs=[m["path"] for m in members],
                            input_sha256=[m["sha256"] for m in members], tag=tag,
                            error="; ".join(errors) or None, mtime=max(mtimes, default=0.0)))
    return sorted(out, key=lambda i: i.id)


def known_keys(rows: list[dict[str, Any]]) -> set[str]:
    """The inputs a dataset already holds: their sha256, or their path where none could be taken."""
    keys: set[str] = set()
    for r in rows:
        for path, sha in zip(r.get("inputs") or [], r.get("input_sha256") or [], strict=False):
            keys.add(sha or f"path:{path}")
    return keys


def _keys_of(inc: Incident) -> set[str]:
    return {sha or f"path:{p}" for p, sha in zip(inc.inputs, inc.input_sha256, strict=True)}


# ---------------------------------------------------------------------------------------------
# The per-incident task
# ---------------------------------------------------------------------------------------------


def _gpu_identities(tl) -> dict[int, str]:
    """nvidia-smi index → the GPU's serial (else its UUID) from any row that names one: what follows a
    board across hosts and reboots, so repeated faults of one GPU show across incidents. The index of a
    row that names a UUID or bus id but no index (the kernel's Xid lines) comes from the timeline's
    GPU map, as the detectors get theirs."""
    import polars as pl

    from forensics.facts.gpu_map import gpu_map

    ev = tl.events
    if ev.is_empty() or "attrs" not in ev.columns:
        return {}
    rows = ev.filter(pl.col("attrs").str.contains('"(?:serial|uuid|gpu_uuid|gpu_serial)"'))
    if rows.is_empty():
        return {}
    m = gpu_map(tl)
    serial: dict[int, str] = {}
    uuid: dict[int, str] = {}
    for r in rows.select("gpu", "host", "attrs").iter_rows(named=True):
        try:
            a = json.loads(r["attrs"])
        except ValueError:
            continue
        u = str(a.get("uuid") or a.get("gpu_uuid") or "").strip()
        u = u if u.upper().startswith("GPU-") else ""
        g = r["gpu"]
        if g is None:
            bus = a.get("pci_bus_id") or a.get("bus_id") or a.get("gpu_bus_id")
            g = m.index_of(uuid=u or None, pci_bus_id=bus, host=r["host"])
        if g is None:
            continue
        s = str(a.get("serial") or a.get("gpu_serial") or "").strip()
        if s and s.strip("0") and s.lower() not in ("n/a", "[n/a]", "none"):
            serial.setdefault(int(g), f"serial:{s}")
        if u:
            uuid.setdefault(int(g), u)
    return {**uuid, **serial}


def _incident_facts(tl, doc: dict[str, Any]) -> dict[str, Any]:
    import polars as pl

    from forensics.facts.engines import engine_of

    ev = tl.events
    hosts = []
    if tl.facts.host:
        hosts.append(str(tl.facts.host))
    if not ev.is_empty() and "host" in ev.columns:
        hosts += [h for h in ev.get_column("host").drop_nulls().unique().sort().to_list() if h not in hosts]
    first = last = None
    if not ev.is_empty() and "ts" in ev.columns:
        ts = ev.get_column("ts").drop_nulls()
        if ts.len():
            first, last = ts.min(), ts.max()
    engine = None
    if not ev.is_empty() and "source" in ev.columns:
        sources = ev.get_column("source").drop_nulls().unique().sort().to_list()
        launches = ev.filter(pl.col("kind") == "launch_command").iter_rows(named=True)
        engine = engine_of([{"source": s} for s in sources] + list(launches))
    version = tl.facts.versions.get(engine) if engine else None
    if engine == "sglang":
        version = version or tl.facts.sglang_version
    findings = doc.get("findings") or []
    root = next((f for f in findings if f.get("rule_id") == doc.get("root_cause")), None)
    from forensics.model import SEVERITY_RANK

    worst = min(findings, key=lambda f: SEVERITY_RANK.get(f.get("severity"), 9), default=None)
    return {"hosts": hosts, "engine": engine, "engine_version": version, "collected_at": tl.facts.collected_at,
            "first_event": first, "last_event": last,
            "root_cause_rule": root.get("rule_id") if root else None,
            "root_cause_category": root.get("category") if root else None,
            "root_cause_title": root.get("title") if root else None,
            "severity": (root or worst or {}).get("severity"),
            "n_findings": len(findings)}


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def analyse_incident(spec: dict[str, Any], out_dir: str, tz: str | None = None,
                     formats: tuple[str, ...] = DEFAULT_FORMATS) -> dict[str, Any]:
    """Analyse one incident exactly as `report` does, write its report folder and findings partition,
    and return its incidents.parquet row. Never raises for a bad input: the row carries the error."""
    from forensics import __version__
    from forensics.fleet.dataset import finding_rows, write_findings

    out = Path(out_dir)
    inc_id = spec["incident_id"]
    row: dict[str, Any] = {
        "incident_id": inc_id, "tag": spec.get("tag"), "inputs": list(spec["inputs"]),
        "input_sha256": list(spec["input_sha256"]), "hosts": [], "engine": None, "engine_version": None,
        "collected_at": None, "first_event": None, "last_event": None,
        "date": datetime.fromtimestamp(spec.get("mtime") or 0, UTC).date() if spec.get("mtime") else None,
        "root_cause_rule": None, "root_cause_category": None, "root_cause_title": None, "severity": None,
        "n_findings": None, "error": spec.get("error"), "report": None, "tool_version": __version__,
    }
    if row["error"]:
        return row
    from forensics.analysis import analyse
    from forensics.inputs import InputError
    from forensics.report import PLOTLY_JS, write_outputs

    report_dir = out / "incidents" / inc_id
    try:
        tl, doc = analyse([Path(p) for p in spec["inputs"]], tz, quiet=True, spill=out / "incidents")
        facts = _incident_facts(tl, doc)
        # the incident's page loads the dataset's one plotly.js (DIR/plotly.min.js, two folders up)
        write_outputs(doc, tl, report_dir, set(formats), plotlyjs_src=f"../../{PLOTLY_JS}")
        gpu_ids = _gpu_identities(tl)
    except (InputError, OSError, ValueError, MemoryError) as e:
        row["error"] = _one_line(e)
        return row
    except Exception as e:  # noqa: BLE001 - a bug on one input must not end a thousand-incident run
        row["error"] = f"could not process the input: {_one_line(e)}"
        return row
    row.update(facts)
    row["collected_at"] = _utc(row["collected_at"])
    row["first_event"], row["last_event"] = _utc(row["first_event"]), _utc(row["last_event"])
    when = row["collected_at"] or row["last_event"]
    if when is not None:
        row["date"] = when.date()
    day = row["date"] or date(1970, 1, 1)
    row["date"] = day
    row["report"] = f"incidents/{inc_id}/"
    rows = finding_rows({**row, "inputs": row["inputs"], "input_sha256": row["input_sha256"]}, doc, gpu_ids)
    write_findings(out, day, inc_id, rows)
    return row


# ---------------------------------------------------------------------------------------------
# Running many: a process pool or Ray
# ---------------------------------------------------------------------------------------------


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _worker_init(threads: int) -> None:
    # each worker is one incident at a time: polars' own pool sized to the worker's share of the cores
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads))
    os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:1000,muzzy_decay_ms:0")


#: the pool is replaced after this many incidents per worker, so whatever one input left behind in the
#: allocators goes back to the system and memory per worker stays flat over a long run. (A fresh pool
#: per batch rather than ``max_tasks_per_child``: with that, CPython before 3.13 can hang for good when
#: a worker retires while tasks are queued — it did here, at the 51st of 200 incidents.)
TASKS_PER_WORKER = 100


def _pool(workers: int):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, default_workers() // workers)
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_init, initargs=(threads,))


def identify_all(paths: list[Path], workers: int) -> list[dict[str, Any]]:
    """Every input's sha256 and tag. Threads, not processes: hashing and decompression release the GIL,
    and a thread starts in microseconds where a spawned process takes a second."""
    from concurrent.futures import ThreadPoolExecutor

    if workers <= 1 or len(paths) <= 1:
        return [identify(str(p)) for p in paths]
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(identify, [str(p) for p in paths]))


def run_pool(specs: list[dict[str, Any]], out_dir: str, tz: str | None, formats: tuple[str, ...], workers: int,
             on_done: Callable[[dict[str, Any]], None]) -> None:
    """The incidents in a process pool, ``TASKS_PER_WORKER`` per worker per pool. An incident whose
    worker died (killed for memory, a crash in native code) is tried once more in a fresh pool, then
    recorded as failed."""
    from concurrent.futures import as_completed

    if workers <= 1:
        for s in specs:
            on_done(analyse_incident(s, out_dir, tz, formats))
        return
    queue, retried = list(specs), set()
    while queue:
        batch, queue = queue[: workers * TASKS_PER_WORKER], queue[workers * TASKS_PER_WORKER:]
        with _pool(workers) as ex:
            futures = {ex.submit(analyse_incident, s, out_dir, tz, formats): s for s in batch}
            for fut in as_completed(futures):
                spec = futures[fut]
                try:
                    on_done(fut.result())
                except Exception as e:  # noqa: BLE001 - the worker died; the pool is broken for this batch
                    if spec["incident_id"] in retried:
                        on_done(analyse_incident({**spec, "error": f"worker failed: {_one_line(e)}"},
                                                 out_dir, tz, formats))
                    else:
                        retried.add(spec["incident_id"])
                        queue.append(spec)


def run_ray(specs: list[dict[str, Any]], out_dir: str, tz: str | None, formats: tuple[str, ...], address: str,
            workers: int | None, on_done: Callable[[dict[str, Any]], None]) -> None:
    """The same task as Ray tasks. ``address``: ``auto`` (the cluster this machine belongs to), ``local``
    (a Ray instance started here, for a laptop or a test), or ``ray://host:10001`` / ``host:6379``.
    Workers read the inputs and write DIR themselves: both must be paths every node sees."""
    try:
        import ray
    except ImportError:
        raise FleetUsageError("--ray: Ray is not installed (pip install 'forensics[ray]')") from None
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "ignore_reinit_error": True, "configure_logging": False}
        if address == "local":
            kwargs["num_cpus"] = workers or default_workers()
            # local workers import forensics from where this driver does
            kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).resolve().parents[2])] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}}
        else:
            kwargs["address"] = address
        ray.init(**kwargs)
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(analyse_incident)
        pending = {task.remote(s, out_dir, tz, formats): s for s in specs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                spec = pending.pop(ref)
                try:
                    on_done(ray.get(ref))
                except Exception as e:  # noqa: BLE001 - a task lost with its node, or a worker crash
                    on_done(analyse_incident({**spec, "error": f"ray task failed: {_one_line(e)}"},
                                             out_dir, tz, formats))
    finally:
        if started:
            ray.shutdown()


@dataclass
class FleetResult:
    analysed: list[dict[str, Any]] = field(default_factory=list)  # this run's rows
    skipped: int = 0  # incidents already in the dataset
    total: int = 0  # rows in incidents.parquet after the run
    seconds: float = 0.0

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.analysed if r.get("error")]


def run_fleet(args: list[str], out_dir: Path, workers: int | None = None, ray: str | None = None,
              since: date | None = None, tz: str | None = None, formats: tuple[str, ...] = DEFAULT_FORMATS,
              say: Callable[[str], None] | None = None, index: bool = True) -> FleetResult:
    """Expand, identify, skip what the dataset holds, analyse the rest, append, render the index."""
    t0 = time.monotonic()
    say = say or (lambda _m: None)
    out_dir = Path(out_dir).absolute()
    workers = workers or default_workers()
    paths = expand_inputs(args)
    if since is not None:
        cutoff = datetime(since.year, since.month, since.day, tzinfo=UTC).timestamp()
        kept = [p for p in paths if _newest_mtime(p) >= cutoff]
        if len(kept) < len(paths):
            say(f"--since {since}: {len(paths) - len(kept)} input(s) last modified before it left out")
        paths = kept
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(out_dir)
    try:
        if "html" in formats:  # before any incident's page, which loads it from two folders up
            from forensics.report import write_plotlyjs

            write_plotlyjs(out_dir)
        return _run_locked(paths, out_dir, workers, ray, tz, formats, say, index, t0)
    finally:
        lock.close()


def _lock(out_dir: Path):
    """One run per DIR at a time: two would each rewrite incidents.parquet without the other's rows."""
    import fcntl

    fh = open(out_dir / ".fleet.lock", "a")  # noqa: SIM115 - held for the whole run, closed by the caller
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise FleetUsageError(f"{out_dir}: another `forensics fleet` run is writing it") from None
    return fh


def _run_locked(paths: list[Path], out_dir: Path, workers: int, ray: str | None, tz: str | None,
                formats: tuple[str, ...], say: Callable[[str], None], index: bool, t0: float) -> FleetResult:
    from forensics.fleet.dataset import read_incidents, write_incidents

    old_rows = read_incidents(out_dir)
    have = known_keys(old_rows)
    identities, seen = [], set()
    for ident in identify_all(paths, workers):
        if ident["sha256"] and ident["sha256"] in seen:  # the same bytes under two names: one incident
            say(f"{ident['path']}: same content as an input before it, left out")
            continue
        seen.add(ident["sha256"])
        identities.append(ident)
    incidents = group_incidents(identities)
    todo = [i for i in incidents if not _keys_of(i) <= have]
    result = FleetResult(skipped=len(incidents) - len(todo))
    say(f"{len(incidents)} incident(s) from {len(paths)} input(s); {result.skipped} already in {out_dir}, "
        f"{len(todo)} to analyse" + (f" on Ray ({ray})" if ray else f" with {min(workers, max(len(todo), 1))} worker(s)"))

    def done(row: dict[str, Any]) -> None:
        result.analysed.append(row)
        n = len(result.analysed)
        what = f"error: {row['error']}" if row.get("error") else (
            f"root cause {row['root_cause_rule']} ({row['root_cause_category']})" if row.get("root_cause_rule")
            else f"no root cause, {row.get('n_findings') or 0} finding(s)")
        say(f"[{n}/{len(todo)}] {row['incident_id']}: {what}")

    specs = [i.spec() for i in todo]
    try:
        if ray:
            run_ray(specs, str(out_dir), tz, formats, ray, workers, done)
        else:
            run_pool(specs, str(out_dir), tz, formats, min(workers, max(len(specs), 1)), done)
    finally:
        # what finished is kept even when the run is interrupted: a rerun picks up the rest
        rows = old_rows + result.analysed
        if result.analysed or not (out_dir / "incidents.parquet").exists():
            write_incidents(out_dir, rows)
        result.total = len(rows)
    if index:
        from forensics.fleet.index import write_index

        write_index(out_dir)
    result.seconds = time.monotonic() - t0
    return result


def _newest_mtime(p: Path) -> float:
    if p.is_dir():
        return max((q.stat().st_mtime for q in p.rglob("*") if q.is_file()), default=p.stat().st_mtime)
    return p.stat().st_mtime
