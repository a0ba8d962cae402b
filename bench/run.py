#!/usr/bin/env python3
"""Benchmark: `forensics timeline` / `report` against the scan limit (`grep -c`) on the same files.

    python bench/run.py                      # 1 GB
    python bench/run.py --size 256MB --size 1GB --size 4GB
    python bench/run.py --bundle             # also `report` on the same set as a .tar.zst bundle
    python bench/run.py --bundle gz          # … as a .tar.gz
    python bench/run.py --giant-line 200MB   # `report` on a log that is one 200 MB line: peak RSS
    python bench/run.py --small-files        # also a 200,000-line input of many short mixed files
    python bench/run.py --profile            # also the top five entries of `timeline`'s profile
    python bench/run.py --shape vllm=256MB   # only `timeline` and `report` on one shape (bench/shapes.py): RSS

For each size it generates (once, cached under bench/_data/) a synthetic multi-rank SGLang log
set — 8 rank logs with every line kind in realistic proportions (mostly Decode/Prefill batch
lines and HTTP access lines, the start-up lifecycle, retractions, an OOM traceback), a main
process log, free/nvidia-smi snapshots and a kernel log — then, with a warm page cache, times
`grep -c` over the files, `forensics timeline` and `forensics report`, and prints wall time,
the ratio to grep and the peak RSS of each child. Finally `forensics report` on the seed bundle.
Ratios are what to compare across machines; absolute seconds are this machine's. On a shared machine
every round measures grep right before the contenders and the median of ``--repeat`` rounds (3) is
printed: the ratios of one round, not seconds from different moments, are what the medians are of.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "_data"
RANKS = 8


def parse_size(s: str) -> int:
    s = s.strip().upper().replace("IB", "B")
    for suf, mul in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20)):
        if s.endswith(suf):
            return int(float(s[: -len(suf)]) * mul)
    return int(s)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _startup(rank: int, t0: float) -> list[str]:
    p = f"DP{rank} TP{rank}"
    s = _stamp(t0)
    return [
        f"[{s} {p}] Init torch distributed begin.",
        f"[{s} {p}] Init torch distributed ends. mem usage=0.71 GB",
        f"[{s} {p}] Load weight begin. avail mem=93.79 GB",
        f"[{s} {p}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.07 GB, mem usage=72.72 GB.",
        f"[{s} {p}] KV Cache is allocated. #tokens: 221628, KV size: 14.50 GB",
        f"[{s} {p}] Memory pool end. avail mem=4.53 GB",
        f"[{s} {p}] Capture cuda graph begin. This can take up to several minutes. avail mem=4.49 GB",
        "Capturing batches (bs=512 avail_mem=4.21 GB):   2%|▏         | 1/52 [00:04<03:24,  4.01s/it]",
        f"[{s} {p}] Capture cuda graph end. Time elapsed: 98.71 s. mem usage=2.58 GB. avail mem=1.91 GB.",
        f"[{s} {p}] max_total_num_tokens=221628, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests=2048, context_len=262144, available_gpu_mem=1.89 GB",
        f"[{s} {p}] Allocating 48.00 GB host memory for hierarchical KV cache.",
    ]


def _rank_body(rank: int, target: int, rng: random.Random, t0: float) -> list[str]:
    """Lines until ~target bytes: decode batches dominate, prefill every ~8th, a retraction rarely."""
    p = f"DP{rank} TP{rank}"
    out: list[str] = []
    size = 0
    t = t0
    while size < target:
        t += rng.random() * 0.5
        s = _stamp(t)
        r = rng.random()
        if r < 0.80:
            line = (f"[{s} {p}] Decode batch, #running-req: {rng.randint(1, 64)}, #token: {rng.randint(1000, 220000)}, "
                    f"token usage: {rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(50, 2000):.2f}, "
                    f"#queue-req: {rng.randint(0, 40)}, ")
        elif r < 0.95:
            line = (f"[{s} {p}] Prefill batch, #new-seq: {rng.randint(1, 8)}, #new-token: {rng.randint(16, 8192)}, "
                    f"#cached-token: {rng.randint(0, 60000)}, token usage: {rng.random():.2f}, #running-req: {rng.randint(0, 64)}, "
                    f"#queue-req: {rng.randint(0, 40)}, ")
        elif r < 0.9995:
            line = f'[{s}] INFO:     127.0.0.1:{rng.randint(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK'
        else:
            line = (f"[{s} {p}] KV cache pool is full. Retract requests. #retracted_reqs: {rng.randint(1, 4)}, "
                    f"#new_token_ratio: 0.4132 -> 0.7021")
        out.append(line)
        size += len(line) + 1
    return out


OOM_TAIL = [
    "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2677, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.41 GiB. GPU 3 has a total capacity of 95.00 GiB "
    "of which 1.02 GiB is free. Including non-PyTorch memory, this process has 93.96 GiB memory in use. Of the allocated "
    "memory 90.31 GiB is allocated by PyTorch, with 0.42 GiB allocated in private pools (e.g., CUDA Graphs), and 1.09 GiB "
    "is reserved by PyTorch but unallocated.",
]


def generate(dest: Path, total: int, seed: int = 7) -> None:
    """Write the synthetic log set of ~total bytes into dest (atomically, via a temp folder)."""
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    rng = random.Random(seed)
    t0 = 1_763_630_042.0  # fixed: the same size gives the same files
    (tmp / "logs").mkdir()
    per_rank = max(total // RANKS, 4096)
    for rank in range(RANKS):
        lines = _startup(rank, t0) + _rank_body(rank, per_rank, rng, t0 + 300)
        if rank == 3:
            last = _stamp(t0 + 300 + len(lines) * 0.25)
            lines.append(f"[{last} DP3 TP3] " + OOM_TAIL[0])
            lines.extend(OOM_TAIL[1:])
        (tmp / "logs" / f"tp{rank}.log").write_text("\n".join(lines) + "\n")
    (tmp / "logs" / "server.log").write_text(
        f"[{_stamp(t0)}] server_args=ServerArgs(model_path='/models/Kimi-K2', tp_size=8, dp_size=8, "
        "enable_dp_attention=True, mem_fraction_static=0.93, enable_hierarchical_cache=True, hicache_size=48)\n"
        f"[{_stamp(t0 + 330)}] The server is fired up and ready to roll!\n"
        f"[{_stamp(t0 + 9000)}] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n")
    snaps = tmp / "snapshots"
    snaps.mkdir()
    for i in range(4):
        used = [96413 if g in (0, 2) else 3 for g in range(8)] if i == 3 else [93000 + g for g in range(8)]
        (snaps / f"nvidia-smi-{i}.csv").write_text(
            "index, memory.used [MiB], memory.total [MiB]\n" + "".join(f"{g}, {u} MiB, 97887 MiB\n" for g, u in enumerate(used)))
        (snaps / f"free-{i}.txt").write_text(
            "               total        used        free      shared  buff/cache   available\n"
            f"Mem:    482000000000 {40 + i * 90}000000000 {440 - i * 90}000000000 0 1000000000 {441 - i * 90}000000000\n"
            "Swap:              0           0           0\n")
    kern = [f"[{i * 0.37:12.6f}] usb 1-{i % 4}: new high-speed USB device number {i}" for i in range(20000)]
    kern.append("[ 9012.000001] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0")
    kern.append("[ 9012.000900] Out of memory: Killed process 41233 (sglang::schedul) total-vm:812345678kB, "
                "anon-rss:301234567kB, file-rss:1234kB, shmem-rss:0kB, UID:0 pgtables:600000kB oom_score_adj:0")
    (tmp / "dmesg.txt").write_text("\n".join(kern) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def dataset(total: int) -> Path:
    dest = DATA / f"set-{total}"
    marker = dest / ".complete"
    if not marker.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        print(f"generating {total / (1 << 20):,.0f} MiB of synthetic logs in {dest} …", file=sys.stderr)
        generate(dest, total)
        marker.write_text("ok\n")
    return dest


def bundle_of(d: Path, kind: str) -> Path:
    """The set as a collect-style bundle (one top folder), made once and cached next to the set."""
    dest = d.parent / f"{d.name}.tar.{kind}"
    if dest.exists():
        return dest
    import tarfile

    import zstandard

    print(f"packing {dest.name} …", file=sys.stderr)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as raw:
        if kind == "zst":  # as `forensics collect -o x.tar.zst` writes it: zstd level 10, one stream
            out = zstandard.ZstdCompressor(level=10, threads=-1).stream_writer(raw, closefd=False)
            mode = "w|"
        else:
            out, mode = raw, "w|gz"
        with tarfile.open(fileobj=out, mode=mode, format=tarfile.PAX_FORMAT) as tf:
            for f in files_of(d):
                tf.add(f, arcname=f"forensics-bench-{d.name}/{Path(f).relative_to(d).as_posix()}", recursive=False)
        if kind == "zst":
            out.close()
    tmp.rename(dest)
    return dest


def files_of(d: Path) -> list[str]:
    return sorted(str(p) for p in d.rglob("*") if p.is_file() and p.name != ".complete")


#: CPU seconds (user + system) of the last child :func:`timed` ran: on a machine others share, the ratio of
#: CPU times moves far less with their load than the ratio of wall times.
last_cpu = 0.0


def timed(argv: list[str]) -> tuple[float, int, int]:
    """Run argv; return wall seconds, peak RSS of the child in bytes, and its exit code (its CPU seconds
    in :data:`last_cpu`)."""
    global last_cpu
    # stdout and stderr go to files: GNU grep stops at the first match when stdout is /dev/null, and a
    # pipe nobody reads while we wait could fill up
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errf:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=errf)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    rc = os.waitstatus_to_exitcode(status)
    last_cpu = usage.ru_utime + usage.ru_stime
    if rc not in (0, 1):
        print(f"  ! {' '.join(argv[:3])} … exited {rc}: {err.strip().splitlines()[-1:] }", file=sys.stderr)
    return wall, usage.ru_maxrss * 1024, rc


def forensics_cmd() -> list[str]:
    return [sys.executable, "-m", "forensics.cli"]


def small_files(lines: int = 200_000, seed: int = 11) -> Path:
    """A folder (made once under bench/_data/) of many short files of mixed kinds, ``lines`` in all: short
    SGLang rank logs with start-up and a few batch lines, kernel logs, free and nvidia-smi snapshots,
    tracebacks pasted into notes. Many small members cost what one big log does not: per-file sniffing,
    the auxiliary readers' set-up, one frame per file."""
    dest = DATA / f"small-{lines}"
    if (dest / ".complete").exists():
        return dest
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=DATA))
    rng = random.Random(seed)
    t0 = 1_763_630_042.0
    done = i = 0
    while done < lines:
        kind = i % 5
        if kind == 0:
            body = _startup(i % 8, t0) + _rank_body(i % 8, rng.randint(8_000, 40_000), rng, t0 + 300)
        elif kind == 1:
            body = [f"[{k * 0.37 + i:12.6f}] usb 1-{k % 4}: new high-speed USB device number {k}" for k in range(rng.randint(40, 200))]
        elif kind == 2:
            body = ["index, memory.used [MiB], memory.total [MiB]", *(f"{g}, {93000 + g} MiB, 97887 MiB" for g in range(8))]
        elif kind == 3:
            body = ["               total        used        free      shared  buff/cache   available",
                    f"Mem:    482000000000 {40 + i % 9}0000000000 4000000000 0 1000000000 4100000000",
                    "Swap:              0           0           0"]
        else:
            body = [f"note {i}: the server fell over after the upgrade", *OOM_TAIL, "we restarted it with --tp 8"]
        (tmp / f"f{i:05d}.{['log', 'dmesg', 'csv', 'txt', 'md'][kind]}").write_text("\n".join(body) + "\n")
        done += len(body)
        i += 1
    (tmp / ".complete").write_text("ok\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def top_of_profile(d: Path, n: int = 5) -> list[str]:
    """The ``n`` entries of `forensics timeline`'s cProfile with the most time of their own, on ``d``."""
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        prof = f"{tmp}/t.prof"
        subprocess.run([sys.executable, "-m", "cProfile", "-o", prof, "-m", "forensics.cli", "timeline", str(d),
                        "-o", f"{tmp}/t.parquet", "-q"], check=False, capture_output=True)
        stats = pstats.Stats(prof)
        total = stats.total_tt  # type: ignore[attr-defined]
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:n]  # type: ignore[attr-defined]
    out = []
    for (path, line, fn), (_cc, _nc, tt, ct, _callers) in rows:
        where = fn if path == "~" else f"{Path(path).name}:{line}({fn})"
        out.append(f"{tt:7.2f}s {100 * tt / total:5.1f}%  (cum {ct:6.2f}s)  {where}")
    return out


def giant_logs(size: int) -> list[Path]:
    """Two logs made once under bench/_data/: one that is a single ``size``-byte line (a request body
    logged whole, no line end at all), and the same line between ordinary start-up and decode lines."""
    DATA.mkdir(parents=True, exist_ok=True)
    out = []
    t0 = 1_764_000_000.0
    for shape in ("alone", "amid"):
        dest = DATA / f"giant-{size}-{shape}.log"
        out.append(dest)
        if dest.exists():
            continue
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            if shape == "amid":
                fh.write(("\n".join(_startup(0, t0)) + "\n").encode())
            head = f"[{_stamp(t0 + 200)} TP0] Receive: obj=GenerateReqInput(text='".encode()
            fh.write(head)
            block = b"All work and no play makes a long request body. " * 20_000
            left = size - len(head) - 2
            while left > 0:
                fh.write(block[:left])
                left -= len(block)
            fh.write(b"')")
            if shape == "amid":
                fh.write(b"\n" + f"[{_stamp(t0 + 201)} TP0] Decode batch. #running-req: 1, #token: 900, token usage: "
                                  "0.01, gen throughput (token/s): 40.00, #queue-req: 0\n".encode())
        tmp.rename(dest)
    return out


def giant_line(size: int) -> int:
    """`forensics report` on each giant-line log: wall time and peak RSS (the budget is 512 MB)."""
    logs = giant_logs(size)
    worst = 0
    print(f"{'log':>28} {'size':>9} {'report':>9} {'peak RSS':>10}")
    for log in logs:
        with tempfile.TemporaryDirectory() as tmp:
            wall, rss, rc = timed([*forensics_cmd(), "report", str(log), "-o", f"{tmp}/r", "-q"])
        worst = max(worst, rss)
        print(f"{log.name:>28} {log.stat().st_size / 1e6:>7,.0f}MB {wall:>8.1f}s {rss / 1e6:>8,.0f}MB"
              f"{'' if rc in (0, 1) else f'  (exit {rc})'}")
    print(f"peak RSS {worst / 1e6:,.0f} MB: {'under' if worst < 512e6 else 'OVER'} the 512 MB budget")
    return 0 if worst < 512e6 else 1


def shape_runs(specs: list[str]) -> int:
    """`forensics timeline` and `report` on each ``NAME[=SIZE]`` shape of bench/shapes.py: wall time and
    peak RSS (the budget is 512 MB)."""
    sys.path.insert(0, str(ROOT))
    from shapes import SHAPES, shape

    worst = 0
    print(f"{'shape':>8} {'size':>9} {'timeline':>9} {'RSS':>8} {'report':>9} {'RSS':>8}")
    for spec in specs:
        name, _, size = spec.partition("=")
        if name not in SHAPES:
            raise SystemExit(f"unknown shape {name!r} (one of {', '.join(SHAPES)})")
        path = shape(name, parse_size(size or "64MB"))
        with tempfile.TemporaryDirectory() as tmp:
            t_wall, t_rss, _ = timed([*forensics_cmd(), "timeline", str(path), "-o", f"{tmp}/t.parquet", "-q"])
            r_wall, r_rss, _ = timed([*forensics_cmd(), "report", str(path), "-o", f"{tmp}/r", "-q"])
        worst = max(worst, t_rss, r_rss)
        print(f"{name:>8} {path.stat().st_size / (1 << 20):>7,.0f}MB {t_wall:>8.1f}s {t_rss / (1 << 20):>6,.0f}MB "
              f"{r_wall:>8.1f}s {r_rss / (1 << 20):>6,.0f}MB")
    print(f"peak RSS {worst / (1 << 20):,.0f} MB: {'under' if worst < 512 << 20 else 'OVER'} the 512 MB budget")
    return 0 if worst < 512 << 20 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", action="append", help="input size, e.g. 256MB, 1GB, 4GB (repeatable; default 1GB)")
    ap.add_argument("--no-report", action="store_true", help="time only grep and `forensics timeline`")
    ap.add_argument("--bundle", nargs="?", const="zst", choices=["zst", "gz"],
                    help="also time `forensics report` on the set packed as a .tar.zst (default) or .tar.gz bundle")
    ap.add_argument("--giant-line", metavar="SIZE", nargs="?", const="200MB",
                    help="only time `forensics report` on a log that is one SIZE-byte line (default 200MB)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per size; the medians are printed (default 3)")
    ap.add_argument("--small-files", action="store_true",
                    help="also time a 200,000-line input of many short mixed files")
    ap.add_argument("--profile", action="store_true", help="also print the top five entries of timeline's profile")
    ap.add_argument("--shape", action="append", metavar="NAME[=SIZE]",
                    help="only time timeline and report on a shape of bench/shapes.py (unknown, vllm, kernel, plain; "
                         "default size 64MB), with peak RSS (repeatable)")
    args = ap.parse_args()
    if args.shape:
        return shape_runs(args.shape)
    if args.giant_line:
        return giant_line(parse_size(args.giant_line))
    sizes = [parse_size(s) for s in (args.size or ["1GB"])]
    ready = all((DATA / f"set-{t}" / ".complete").exists() for t in sizes)
    if args.bundle:
        ready = ready and all((DATA / f"set-{t}.tar.{args.bundle}").exists() for t in sizes)
    if args.small_files:
        ready = ready and (DATA / "small-200000" / ".complete").exists()
    if not ready:
        if args.small_files:
            small_files()
        for total in sizes:
            d = dataset(total)
            if args.bundle:
                bundle_of(d, args.bundle)
        # start afresh: a child's peak RSS counts the parent's memory at fork, and generating grew it
        os.execv(sys.executable, [sys.executable, *sys.argv])
    rows = []
    bundles = []
    inputs = [(dataset(total), f"{total / (1 << 30):.2f}GB") for total in sizes]
    if args.small_files:
        inputs.append((small_files(), "200k lines"))
    for d, label in inputs:
        files = files_of(d)
        nbytes = sum(os.path.getsize(f) for f in files)
        for f in files:  # warm the page cache so every contender reads from memory
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass
        rounds = []
        for _ in range(max(1, args.repeat)):  # grep right before each contender: the same load on both
            with tempfile.TemporaryDirectory() as tmp:
                g_wall, _g_rss, _ = timed(["grep", "-c", "-e", "TP", "-r", str(d)])
                g_cpu = max(last_cpu, 1e-3)
                t_wall, t_rss, _ = timed([*forensics_cmd(), "timeline", str(d), "-o", f"{tmp}/t.parquet", "-q"])
                t_cpu = last_cpu
                if args.no_report:
                    g2_wall, g2_cpu, r_wall, r_cpu, r_rss = g_wall, g_cpu, float("nan"), float("nan"), 0
                else:
                    g2_wall, _g_rss, _ = timed(["grep", "-c", "-e", "TP", "-r", str(d)])
                    g2_cpu = max(last_cpu, 1e-3)
                    r_wall, r_rss, _ = timed([*forensics_cmd(), "report", str(d), "-o", f"{tmp}/r", "-q"])
                    r_cpu = last_cpu
            rounds.append((g_wall, t_wall, t_wall / g_wall, t_rss, r_wall, r_wall / g2_wall, r_rss,
                           t_cpu / g_cpu, r_cpu / g2_cpu))
        med = [statistics.median(r[k] for r in rounds) for k in range(9)]
        rows.append((label, nbytes, *med, max(r[3] for r in rounds), max(r[6] for r in rounds)))
        if args.bundle:
            b = bundle_of(d, args.bundle)
            with open(b, "rb") as fh:  # warm, as the files were
                while fh.read(1 << 24):
                    pass
            with tempfile.TemporaryDirectory() as tmp:
                b_wall, b_rss, _ = timed([*forensics_cmd(), "report", str(b), "-o", f"{tmp}/r", "-q"])
            bundles.append((nbytes, b, b_wall, b_rss))
    seed = None
    try:
        from forensics.resources import example_bundle

        with tempfile.TemporaryDirectory() as tmp:
            seed = timed([*forensics_cmd(), "report", str(example_bundle()), "-o", tmp, "-q"])
    except Exception as e:  # the bench still reports the big runs
        print(f"seed bundle: not run ({e})", file=sys.stderr)

    print(f"median of {max(1, args.repeat)} round(s); ×grep: the round's own wall-time ratio (cpu: of CPU "
          "seconds); RSS: the highest peak")
    print(f"{'input':>10} {'bytes':>8} {'grep -c':>9} {'timeline':>9} {'×grep':>7} {'cpu×':>7} {'RSS':>8} "
          f"{'report':>9} {'×grep':>7} {'cpu×':>7} {'RSS':>8}")
    for label, nbytes, g, t, tx, _t_rss, r, rx, _r_rss, tcx, rcx, trss, rrss in rows:
        print(f"{label:>10} {nbytes / (1 << 20):>6,.0f}MB {g:>8.2f}s {t:>8.2f}s {tx:>6.1f}× {tcx:>6.1f}× "
              f"{trss / (1 << 20):>6.0f}MB {r:>8.2f}s {rx:>6.1f}× {rcx:>6.1f}× {rrss / (1 << 20):>6.0f}MB")
    if args.profile:
        print(f"timeline's profile on {inputs[0][1]}, top five by own time:")
        for line in top_of_profile(inputs[0][0]):
            print("  " + line)
    for nbytes, b, wall, rss in bundles:
        print(f"{nbytes / (1 << 30):>8.2f}GB as {b.name} ({b.stat().st_size / (1 << 20):,.0f} MB): "
              f"forensics report {wall:.2f}s, peak RSS {rss / (1 << 20):.0f} MB")
    if seed:
        print(f"seed bundle: forensics report {seed[0]:.2f}s, peak RSS {seed[1] / (1 << 20):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
