"""Several hosts' evidence: which host each input is, one timeline per host, merged into one.

A multi-node server's incident leaves evidence on every node. Each INPUT (a bundle, a folder, a file)
belongs to one host: ``--host NAME=PATH`` says so outright; else a bundle's manifest names it; else the
content does (a prompt ``root@gpu-b:~#``, ``hostname`` output, a journal's host column, NCCL's
``host:pid:tid`` prefix, a pod's node: :mod:`parsers.hostname`); else a folder's own name. Inputs of one
host are read together, exactly as one host's input always was; each host's stamps are turned into UTC
with that host's own offset and boot time; then the hosts' rows are merged, every row naming its host and
every file named under its host (``gpu-b/logs/tp8.log``), so the same evidence read folder by folder or
bundle by bundle gives the same timeline.

One host's evidence (however many inputs) gives back None here: the caller reads it as it always did.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any

import polars as pl

from forensics.inputs import limits, looks_binary, read_inputs
from forensics.inputs.manifest import validate
from forensics.model import Facts, HostFacts, Timeline
from parsers.hostname import stated_hosts

#: Bytes read from the head of each file when looking for the host a text names.
HEAD_BYTES = 256 << 10
#: Files looked at per folder when looking for the host its content names.
MAX_FILES_LOOKED = 200


@dataclass
class HostInput:
    """One INPUT argument and the host it belongs to."""

    path: str
    host: str | None
    how: str  # --host | manifest | content | folder | none
    tag: str | None = None
    manifest: dict[str, Any] | None = None


def parse_host_specs(specs: list[str]) -> dict[str, str]:
    """``--host NAME=PATH`` values as {path: name}; ValueError with the bad value.

    >>> parse_host_specs(["gpu-a=bundles/a.tar.gz", "gpu-b=/evidence/b/"])
    {'bundles/a.tar.gz': 'gpu-a', '/evidence/b': 'gpu-b'}
    """
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"--host {spec!r}: expected NAME=PATH (e.g. --host gpu-b=bundles/b.tar.gz)")
        out[path.rstrip("/") or "/"] = name
    return out


def _same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def _text_heads(files: list[tuple[str, bytes]]) -> str:
    parts = []
    for _name, head in files[:MAX_FILES_LOOKED]:
        if not head or looks_binary(head[:8192]):
            continue
        parts.append(head.decode("utf-8", errors="replace"))
    return "\n".join(parts)


def _manifest_at(folder: Path) -> dict | None:
    for cand in [folder / "manifest.json", *sorted(folder.glob("*/manifest.json"))[:1]]:
        with contextlib.suppress(OSError, ValueError, UnicodeDecodeError, RecursionError):
            if cand.stat().st_size > limits.STREAM_BYTES:  # too big to be a manifest
                continue
            doc = json.loads(cand.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and "artifacts" in doc:
                return validate(doc)[0]
    return None


def _folder_heads(folder: Path) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for dirpath, dirnames, names in os.walk(folder, followlinks=False):
        dirnames.sort()
        for n in sorted(names):
            p = Path(dirpath) / n
            if p.is_symlink() or not p.is_file():
                continue
            with contextlib.suppress(OSError), open(p, "rb") as fh:
                out.append((n, fh.read(HEAD_BYTES)))
            if len(out) >= MAX_FILES_LOOKED:
                return out
    return out


def identify(path: str | os.PathLike, override: str | None = None) -> HostInput:
    """The host one INPUT belongs to, and how we know (see the module)."""
    p = Path(path)
    manifest: dict | None = None
    heads: list[tuple[str, bytes]] = []
    if p.is_dir():
        manifest = _manifest_at(p)
        if not (manifest and manifest.get("host")) and not override:
            heads = _folder_heads(p)
    elif p.is_file():
        try:
            with open(p, "rb") as fh:
                head = fh.read(HEAD_BYTES)
        except OSError:  # reading it for real says why, in one line
            return HostInput(str(path), override, "--host" if override else "none")
        if looks_binary(head[:8192]):  # an archive or a compressed file: its manifest or its members
            inp = read_inputs([p])
            try:
                manifest = inp.manifest
                heads = [(f.name, f.head(HEAD_BYTES)) for f in inp.files[:MAX_FILES_LOOKED]]
            finally:
                inp.close()
        else:
            heads = [(p.name, head)]
    tag = str(manifest["tag"]) if manifest and manifest.get("tag") else None
    if override:
        return HostInput(str(path), override, "--host", tag, manifest)
    if manifest and manifest.get("host"):
        return HostInput(str(path), str(manifest["host"]), "manifest", tag, manifest)
    named = stated_hosts(_text_heads(heads))
    if named:
        best = named.most_common(1)[0][0]
        return HostInput(str(path), best, "content", tag, manifest)
    if p.is_dir():
        return HostInput(str(path), p.resolve().name, "folder", tag, manifest)
    return HostInput(str(path), None, "none", tag, manifest)


def group_inputs(paths: list[str | os.PathLike], overrides: dict[str, str]) -> list[HostInput]:
    """Every INPUT with its host. A loose file that names none joins the host named by the inputs around
    it when they name one host; among several it is taken as its folder's host."""
    found = []
    for path in paths:
        over = next((name for p, name in overrides.items() if _same_path(p, path)), None)
        found.append(identify(path, over))
    named = {h.host for h in found if h.host}
    for h in found:
        if h.host is None and len(named) == 1:
            h.host, h.how = next(iter(named)), "joined"
        elif h.host is None and named:
            h.host, h.how = Path(h.path).resolve().parent.name or "host", "folder"
    return found


def build_by_host(paths: list[str | os.PathLike], overrides: dict[str, str],
                  build: Callable[[list[str | os.PathLike], str | None], Timeline],
                  spill_dir: str | os.PathLike | None = None) -> Timeline | None:
    """The merged timeline of several hosts' evidence; None when all of it is one host's and no
    ``--host`` names it (the caller reads it whole, as before)."""
    inputs = group_inputs(paths, overrides)
    order: list[str] = []
    if all(h.host is None for h in inputs):
        return None
    for h in inputs:
        if h.host not in order:
            order.append(h.host)  # type: ignore[arg-type]
    forced = any(h.how == "--host" for h in inputs)
    if len(order) <= 1 and not forced:
        # folders named only by their own names, when nothing states a second host: one host
        return None
    tags = _tags(inputs)
    timelines: list[tuple[str, Timeline, list[HostInput]]] = []
    for host in order:
        mine = [h for h in inputs if h.host == host]
        tl = build([h.path for h in mine], host)
        timelines.append((host, tl, mine))
    if len(timelines) == 1:  # one host named with --host
        host, tl, mine = timelines[0]
        tl.facts.host = host
        return tl
    return merge(timelines, [str(p) for p in paths], tags, spill_dir)


def _tags(inputs: list[HostInput]) -> dict[str, list[str]]:
    by_tag: dict[str, list[str]] = {}
    for h in inputs:
        if h.tag:
            by_tag.setdefault(h.tag, [])
            if h.host not in by_tag[h.tag]:
                by_tag[h.tag].append(h.host)  # type: ignore[arg-type]
    return by_tag


def _host_facts(host: str, facts: Facts, mine: list[HostInput], files: list[str]) -> HostFacts:
    how = mine[0].how if mine else "content"
    return HostFacts(
        name=host, how=how, input_paths=[h.path for h in mine], collected_at=facts.collected_at,
        utc_offset_s=facts.utc_offset_s, tz_assumed=facts.tz_assumed, boot_time=facts.boot_time,
        sglang_version=facts.sglang_version, versions=dict(facts.versions), gaps=list(facts.gaps),
        notes=list(facts.notes), manifest=facts.manifest, tag=next((h.tag for h in mine if h.tag), None),
        files=files)


def host_resources(hf: HostFacts, events: pl.DataFrame) -> None:
    """The host's RAM, GPUs and container limit as its evidence shows them (observed, never assumed)."""
    mem = events.filter(pl.col("kind") == "host_memory").get_column("total_bytes").drop_nulls()
    hf.ram_bytes = int(mem.max()) if mem.len() else None  # type: ignore[arg-type]
    gpu = events.filter(pl.col("kind") == "gpu_memory")
    hf.gpus = sorted({int(g) for g in gpu.get_column("gpu").drop_nulls().to_list()})
    total = gpu.get_column("total_bytes").drop_nulls()
    hf.gpu_memory_bytes = int(total.max()) if total.len() else None  # type: ignore[arg-type]
    for raw in events.filter(pl.col("kind") == "launch_command").get_column("attrs").drop_nulls().to_list():
        a = json.loads(raw)
        limit = a.get("docker_memory_bytes") or a.get("container_memory_bytes")
        if isinstance(limit, int | float) and limit > 0:
            hf.container_limit_bytes = int(limit)


def _prefixed(host: str, name: str) -> str:
    return f"{host}/{name}"


def merge(timelines: list[tuple[str, Timeline, list[HostInput]]], paths: list[str],
          tags: dict[str, list[str]], spill_dir: str | os.PathLike | None = None) -> Timeline:
    """Hosts' timelines as one: rows named by host and by ``host/file``, facts kept per host."""
    facts = Facts(input_paths=paths)
    frames: list[pl.DataFrame] = []
    coverage: list[dict[str, Any]] = []
    artifacts = []
    unrec: dict[str, list[tuple[int, str]]] = {}
    counts: Counter[str] = Counter()
    streamed = any(tl.parquet_path for _h, tl, _m in timelines)
    host_dtype = pl.Utf8

    def retag(fr: Any, host: str) -> Any:
        return fr.with_columns(host=pl.lit(host, dtype=host_dtype), file=pl.lit(host + "/") + pl.col("file"))

    for host, tl, mine in timelines:
        files = []
        for c in tl.coverage:
            c = dict(c)
            c["file"] = _prefixed(host, str(c.get("file")))
            if c.get("members"):
                c["members"] = [_prefixed(host, m) for m in c["members"]]
            c["host"] = host
            coverage.append(c)
            files.append(c["file"])
        for a in tl.artifacts:
            a.path = _prefixed(host, a.path)
            artifacts.append(a)
        for name, ex in tl.unrecognized_examples.items():
            unrec[_prefixed(host, name)] = ex
        facts.hosts[host] = _host_facts(host, tl.facts, mine, files)
        host_resources(facts.hosts[host], tl.events)
        frames.append(retag(tl.events, host))
        counts.update(tl.kind_counts or {})
    events = pl.concat(frames, how="vertical").sort(["ts", "file", "line"], nulls_last=True, maintain_order=True)
    hf = list(facts.hosts.values())
    stamps = [h.collected_at for h in hf if h.collected_at]
    facts.collected_at = max(stamps) if stamps else None
    versions = {h.sglang_version for h in hf if h.sglang_version}
    facts.sglang_version = sorted(versions)[0] if versions else None
    for h in hf:
        for k, v in h.versions.items():
            facts.versions.setdefault(k, v)
        facts.gaps.extend(f"{h.name}: {g}" for g in h.gaps)
        facts.notes.extend(f"{h.name}: {n}" for n in h.notes)
    if len(versions) > 1:
        facts.notes.append("Hosts run different SGLang versions: " + ", ".join(
            f"{h.name} {h.sglang_version}" for h in hf if h.sglang_version) + ".")
    if len(tags) > 1:
        facts.notes.append("Bundles carry different incident tags: " + "; ".join(
            f"{t}: {', '.join(hs)}" for t, hs in sorted(tags.items())) + " — they were analysed together.")
    facts.notes.append(f"{len(hf)} hosts' evidence: " + ", ".join(f"{h.name} (named by {h.how})" for h in hf) + ".")
    estimate_skew(events, facts)
    merged = Timeline(events=events, facts=facts, coverage=coverage, artifacts=artifacts,
                      unrecognized_examples=unrec,
                      kind_counts=dict(sorted(counts.items())) if streamed else
                      (dict(events.group_by("kind").len().sort("kind").iter_rows()) if events.height else {}))
    if streamed:
        merged.parquet_path = _merge_parquet(timelines, retag, facts, coverage, spill_dir)
        weakref.finalize(merged, shutil.rmtree, os.path.dirname(merged.parquet_path), True)
    return merged


def _merge_parquet(timelines: list[tuple[str, Timeline, list[HostInput]]], retag: Callable[[Any, str], Any],
                   facts: Facts, coverage: list[dict[str, Any]], spill_dir: str | os.PathLike | None) -> str:
    """Every host's complete rows (a streamed host's timeline.parquet read batch by batch, so memory stays
    flat) into one timeline.parquet in a private folder under ``spill_dir``."""
    import pyarrow.parquet as pq

    from forensics.timeline.parquet import PARQUET_OPTIONS, parquet_meta
    from parsers.schema import empty_frame

    folder = tempfile.mkdtemp(prefix=".forensics-hosts-", dir=spill_dir)
    out = os.path.join(folder, "timeline.parquet")
    schema = empty_frame().to_arrow().schema
    writer = pq.ParquetWriter(out, schema, store_schema=False, **PARQUET_OPTIONS)
    try:
        for host, tl, _mine in timelines:
            if tl.parquet_path:
                parts = (pl.from_arrow(b) for b in pq.ParquetFile(tl.parquet_path).iter_batches(batch_size=1 << 16))
            else:
                parts = iter([tl.events])
            for fr in parts:
                if fr.height:  # type: ignore[union-attr]
                    writer.write_table(retag(fr, host).to_arrow().cast(schema))
        writer.add_key_value_metadata(parquet_meta(facts, coverage))
    finally:
        writer.close()
    return out


def host_view(tl: Timeline, host: str) -> Timeline:
    """One host's part of a merged timeline, with that host's facts as the whole input's (what every
    detector reads: its RAM, its GPUs, its ranks)."""
    hf = tl.facts.hosts[host]
    facts = Facts(input_paths=hf.input_paths, host=host, collected_at=hf.collected_at,
                  utc_offset_s=hf.utc_offset_s, tz_assumed=hf.tz_assumed, boot_time=hf.boot_time,
                  sglang_version=hf.sglang_version, versions=dict(hf.versions), gaps=list(hf.gaps),
                  notes=list(hf.notes), manifest=hf.manifest)
    events = tl.events.filter(pl.col("host") == host)
    files = set(hf.files)
    return Timeline(events=events, facts=facts, coverage=[c for c in tl.coverage if c.get("file") in files],
                    artifacts=[a for a in tl.artifacts if a.path in files],
                    unrecognized_examples={k: v for k, v in tl.unrecognized_examples.items() if k in files},
                    kind_counts=dict(events.group_by("kind").len().sort("kind").iter_rows()) if events.height else {})


# ---------------------------------------------------------------------------------------------
# Clock skew between hosts


#: Two hosts' sightings of one shared moment further apart than this are not the same moment.
SAME_MOMENT_S = 900.0


def glog_stamp(stamp: Any, year: int | None, offset_s: int | None) -> datetime | None:
    """c10d's ``MMDD HH:MM:SS.ffffff`` (host-local, no year) on the host's clock in UTC, or None."""
    if not isinstance(stamp, str) or year is None:
        return None
    try:
        local = datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f")
    except ValueError:
        return None
    return (local - timedelta(seconds=offset_s or 0)).replace(tzinfo=UTC)


def _shared_moments(events: pl.DataFrame, facts: Facts) -> dict[str, dict[tuple, Any]]:
    """Per host, the first stamp of each moment every host sees at once: the same collective (process
    group, sequence number, op) timing out, and the end of a rendezvous (all ranks leave
    ``init_process_group`` together)."""
    out: dict[str, dict[tuple, Any]] = {}
    ev = events.filter(pl.col("host").is_not_null() & pl.col("kind").is_in(["nccl_watchdog", "dist_init_end"]))
    years = {h: (y[0] if (y := events.filter(pl.col("host") == h).get_column("ts").drop_nulls()
                          .dt.year().to_list()) else None) for h in facts.hosts}
    rendezvous: dict[str, list[Any]] = {}
    for row in ev.iter_rows(named=True):
        host = row["host"]
        if row["kind"] == "dist_init_end":
            if row["ts"] is not None:
                rendezvous.setdefault(host, []).append(row["ts"])
            continue
        a = json.loads(row["attrs"]) if row.get("attrs") else {}
        hf = facts.hosts.get(host)
        ts = row["ts"] or glog_stamp(a.get("stamp"), years.get(host), hf.utc_offset_s if hf else None)
        if a.get("seq_num") is None or ts is None:
            continue
        key = ("collective", a.get("pg"), a.get("seq_num"), a.get("op_type"))
        cur = out.setdefault(host, {}).get(key)
        if cur is None or ts < cur:
            out[host][key] = ts
    for host, stamps in rendezvous.items():
        for i, ts in enumerate(_starts(sorted(stamps))):
            out.setdefault(host, {})[("rendezvous", i)] = ts
    return out


def _starts(stamps: list[Any]) -> list[Any]:
    """The first stamp of each burst (one server start's ranks finish the rendezvous within seconds)."""
    firsts: list[Any] = []
    for ts in stamps:
        if not firsts or (ts - firsts[-1]).total_seconds() > 60:
            firsts.append(ts)
    return firsts


def estimate_skew(events: pl.DataFrame, facts: Facts) -> None:
    """Each host's clock offset from the first host's, from moments both saw (median of the differences);
    put into ``facts.hosts[*].clock_skew_s`` and said in the notes when it is a second or more."""
    moments = _shared_moments(events, facts)
    hosts = [h for h in facts.hosts if h in moments]
    if len(hosts) < 2:
        return
    ref = hosts[0]
    facts.hosts[ref].clock_skew_s, facts.hosts[ref].clock_skew_from = 0.0, "reference"
    for host in hosts[1:]:
        diffs: list[float] = []
        kinds: set[str] = set()
        for key, ts in moments[host].items():
            other = moments[ref].get(key)
            if other is None:
                continue
            d = (ts - other).total_seconds()
            if abs(d) <= SAME_MOMENT_S:
                diffs.append(d)
                kinds.add("the same collective timing out" if key[0] == "collective" else "rendezvous")
        if not diffs:
            continue
        skew = median(diffs)
        hf = facts.hosts[host]
        hf.clock_skew_s = round(skew, 3)
        hf.clock_skew_from = f"{len(diffs)} shared moment(s): " + " and ".join(sorted(kinds))
        if abs(skew) >= 1.0:
            facts.notes.append(f"Clock skew: {host}'s clock reads {abs(skew):.1f} s {'ahead of' if skew > 0 else 'behind'} "
                               f"{ref}'s ({hf.clock_skew_from}); stamps are shown as each host wrote them.")


__all__ = ["HostInput", "build_by_host", "estimate_skew", "group_inputs", "host_view", "identify",
           "merge", "parse_host_specs"]
