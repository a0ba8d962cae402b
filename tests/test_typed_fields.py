"""The figures detectors read are typed: the batch lines' in the ``fields`` struct (parsers.schema.FIELDS), the
OOM, KV-pool, capture and load rows' in the ``figures`` struct (FIGURES), of the frame and of timeline.parquet,
not in the ``attrs`` JSON, with nothing the parser read lost (issue 23 item 3, issue 26 item 3). The native scanner and its polars twin are held to the Python scanner by test_perf_equivalence;
here, what the three give is checked against the scanner's own dicts."""

from __future__ import annotations

import json

import polars as pl
import pyarrow.parquet as pq
import pytest

from forensics.facts.rows import attrs, field, narrow_fields
from forensics.timeline import build_timeline, write_parquet
from parsers import bulkscan, sglang, sglang_fast, vllm
from parsers.schema import FIELDS, FIELDS_OF, FIGURES, FIGURES_OF, split_fields

# our own lines, in the shapes of reference/sglang_formats.md §6 (0.5.5-0.5.8 decode/prefill) and uvicorn's access line
DECODE = ("[2025-11-20 11:02:41 DP1 TP1] Decode batch, #running-req: 41, #token: 199472, token usage: 0.90, "
          "cuda graph: True, gen throughput (token/s): 913.27, #queue-req: 17, ")
PREFILL = ("[2025-11-20 11:02:47 DP1 TP1] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 57344, "
           "token usage: 0.62, #running-req: 39, #queue-req: 16, ")
#: a whole-number throughput is an int, not the float the member holds; an unknown field has no member
ODD = ("[2025-11-20 11:02:52 DP1 TP1] Decode batch, #running-req: 40, #token: 199000, token usage: 0.89, "
       "cuda graph: False, gen throughput (token/s): 913, #queue-req: 12, spec mode: eagle, ")
ACCESS = '[2025-11-20 11:02:53] INFO:     10.0.0.7:51234 - "POST /generate HTTP/1.1" 200 OK'
TEXT = "\n".join([DECODE, PREFILL, ODD, ACCESS]) + "\n"


@pytest.fixture(params=["scanner", "native", "polars"])
def parse(request, monkeypatch):
    if request.param == "scanner":
        return sglang.parse
    if request.param == "native" and not bulkscan.available():
        pytest.skip(f"native scanner not available: {bulkscan.why_not}")
    if request.param == "polars":
        monkeypatch.setattr(bulkscan, "available", lambda: False)
    return sglang_fast.parse


def _scanner_dicts() -> list[dict]:
    """What parsers.sglang built for each line before any split: the reference."""
    out = []
    for line in (DECODE, PREFILL, ODD):
        kind = "decode_batch" if "Decode" in line else "prefill_batch"
        rest = line.split("] ", 1)[1].split(" batch", 1)[1]
        out.append(sglang._batch(kind, rest)[0][2])
    out.append({"client": "10.0.0.7:51234", "level": "INFO", "method": "POST", "path": "/generate"})
    return out


def test_batch_and_access_rows_need_no_json_and_lose_nothing(parse) -> None:
    ev = parse(TEXT, "tp1.log").events
    assert ev.get_column("kind").to_list() == ["decode_batch", "prefill_batch", "decode_batch", "http_access"]
    rows = list(narrow_fields(ev).iter_rows(named=True))
    assert [r["attrs"] for r in rows] == [None, None, '{"gen_throughput": 913, "spec_mode": "eagle"}',
                                          '{"client": "10.0.0.7:51234", "level": "INFO", "method": "POST", "path": "/generate"}']
    for r, want in zip(rows, _scanner_dicts(), strict=True):
        got = attrs(r)
        # the same keys, values and types (913 stays an int, 0.9 a float, True a bool), in sorted order
        assert json.dumps(got) == json.dumps(dict(sorted(want.items())))
    assert rows[0]["fields"]["queue_req"] == 17 and rows[0]["fields"]["cuda_graph"] is True
    assert rows[2]["fields"]["gen_throughput"] is None  # an int: kept in attrs, not cast
    # the access line's strings stay in attrs (as members they would cost 16 bytes in every row)
    assert ev.get_column("fields").is_null().to_list() == [False, False, False, True]


def test_the_accessor_reads_the_typed_value_first() -> None:
    row = {"kind": "decode_batch", "attrs": '{"spec_mode": "eagle"}', "fields": {"queue_req": 7, "token": None}}
    assert field(row, "queue_req") == 7
    assert field(row, "spec_mode") == "eagle"
    assert field(row, "token") is None
    assert attrs(row) == {"queue_req": 7, "spec_mode": "eagle"}


def test_rows_of_other_kinds_keep_attrs_as_before() -> None:
    text = "[2025-11-20 09:18:02 TP3] KV Cache is allocated. #tokens: 221628, K size: 7.25 GB, V size: 7.25 GB\n"
    row = sglang.parse(text, "tp3.log").events.row(0, named=True)
    # no detector reads the pool's K/V sizes out of attrs (its size is the bytes column): no member for them
    assert row["kind"] == "kv_cache_allocated" and row["fields"] is None and row["figures"] is None
    assert json.loads(row["attrs"])["k_size_bytes"] == attrs(row)["k_size_bytes"] > 7 << 30


def test_split_moves_only_values_of_the_members_type() -> None:
    fields, rest = split_fields("decode_batch", {"queue_req": True, "token_usage": 1, "running_req": 2 ** 70,
                                                 "cuda_graph": True})
    assert fields == {"cuda_graph": True}
    assert rest == {"queue_req": True, "token_usage": 1, "running_req": 2 ** 70}
    assert split_fields("decode_batch", '{"queue_req": 3}') == (None, '{"queue_req": 3}')  # JSON text as given


def test_parquet_has_each_member_as_a_real_column(tmp_path) -> None:
    log = tmp_path / "tp1.log"
    log.write_text(TEXT)
    tl = build_timeline([log])
    out = tmp_path / "t.parquet"
    write_parquet(tl, out)
    schema = pq.ParquetFile(out).schema
    leaves = {schema.column(i).path: schema.column(i).physical_type for i in range(len(schema))}
    assert leaves["fields.queue_req"] == "INT64" and leaves["fields.token_usage"] == "DOUBLE"
    back = pl.read_parquet(out)
    assert back.schema["fields"] == pl.Struct(FIELDS)
    q = back.filter(pl.col("kind") == "decode_batch").get_column("fields").struct.field("queue_req").to_list()
    assert q == [17, 12]


def test_values_of_another_type_stay_in_attrs_on_every_path(parse) -> None:
    """A member's value of another class (a decimal queue, a numeric cuda graph, a whole-number usage, a
    percent throughput) stays in attrs row by row, the same on the scanner, native and polars paths."""
    lines = [DECODE,
             "[2025-11-20 11:02:42 DP1 TP1] Decode batch, #running-req: 41, #token: 199472, token usage: 1, "
             "cuda graph: 1, gen throughput (token/s): 91%, #queue-req: 1.5, ",
             DECODE.replace("11:02:41", "11:02:43")]
    ev = parse("\n".join(lines) + "\n", "tp1.log").events
    want = sglang.parse("\n".join(lines) + "\n", "tp1.log").events
    assert ev.select("attrs", "fields").equals(want.select("attrs", "fields"))
    mid = ev.row(1, named=True)
    assert json.loads(mid["attrs"]) == {"cuda_graph": 1, "queue_req": 1.5, "token_usage": 1}
    assert mid["fields"]["gen_throughput"] == pytest.approx(0.91) and mid["fields"]["token"] == 199472


# our own lines, in the shapes parsers/sglang.py, parsers/failures.py and parsers/vllm.py read (PyTorch's
# OutOfMemoryError message; SGLang's KV-pool sizing and refusal; vLLM's KV-cache, load and capture lines)
SGL_TEXT = "\n".join([
    "[2025-11-20 09:18:01 TP0] max_total_num_tokens=20480, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=512, context_len=32768, available_gpu_mem=9.50 GB",
    "[2025-11-20 09:18:02 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.40 GB",
    "[2025-11-20 09:19:02 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1990, in run_batch',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
    "of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the "
    "allocated memory 70.12 GiB is allocated by PyTorch, and 3.40 GiB is reserved by PyTorch but unallocated.",
]) + "\n"
VLLM_TEXT = "\n".join([
    "INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB",
    "INFO 02-01 10:00:00 executor_base.py:110] # CUDA blocks: 2048, # CPU blocks: 512",
    "(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's max seq len (262144), "
    "(24.0 GiB KV cache is needed, which is larger than the available KV cache memory (3.18 GiB). Based on the "
    "available memory, the estimated maximum model length is 34736. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.",
]) + "\n"


def _parsed(text: str, parse) -> tuple[list[dict], list[dict]]:
    """(the rows of the frame, what the parser built for each: its attrs before any split)."""
    built: list[dict] = []
    real = split_fields

    def spy(kind, attrs):
        built.append(dict(attrs) if isinstance(attrs, dict) else attrs)
        return real(kind, attrs)

    import parsers.schema as schema
    schema.split_fields, saved = spy, schema.split_fields
    try:
        ev = parse(text, "x.log").events
    finally:
        schema.split_fields = saved
    return list(ev.iter_rows(named=True)), built


@pytest.mark.parametrize(("text", "parse", "want"), [
    (SGL_TEXT, sglang.parse, {
        "kv_sizing": {"chunked_prefill_size": 8192, "max_running_requests": 512, "context_len": 32768},
        "cuda_oom": {"allocated_by_pytorch_bytes": int(70.12 * (1 << 30)),
                     "reserved_unallocated_bytes": int(3.40 * (1 << 30))}}),
    (VLLM_TEXT, vllm.parse, {
        "weight_load_end": {"weights_bytes": None}, "kv_sizing": {"gpu_blocks": 2048, "cpu_blocks": 512},
        "kv_cache_too_small": {"max_model_len": 262144, "estimated_max_model_len": 34736}}),
])
def test_oom_kv_capture_and_load_figures_are_typed_and_lose_nothing(text, parse, want) -> None:
    got, built = _parsed(text, parse)
    by_kind = {r["kind"]: r for r in got}
    for kind, members in want.items():
        row = by_kind[kind]
        assert row["fields"] is None and row["figures"] is not None, kind
        for k, v in members.items():
            assert row["figures"][k] is not None if v is None else row["figures"][k] == pytest.approx(v, rel=1e-3)
            assert f'"{k}"' not in (row["attrs"] or ""), (kind, k)  # typed, not repeated in the JSON
        assert set(k for k, v in row["figures"].items() if v is not None) <= FIGURES_OF[kind]
    # attrs and figures together are what the parser built, key for key, value for value, type for type
    parsed = {json.dumps(dict(sorted(b.items()))) for b in built if isinstance(b, dict)}
    for r in got:
        if r["kind"] in FIGURES_OF:
            assert json.dumps(attrs(r)) in parsed, r["kind"]


def test_figures_and_fields_never_share_a_member_nor_a_kind() -> None:
    assert not FIELDS.keys() & FIGURES.keys()
    assert not FIELDS_OF.keys() & FIGURES_OF.keys()
    assert all(m <= FIGURES.keys() for m in FIGURES_OF.values())


def test_a_figure_of_another_type_stays_in_attrs() -> None:
    figures, rest = split_fields("cuda_graph_end", {"graph_bytes": 1.5, "capture_name": "decode"})
    assert figures is None and rest == {"graph_bytes": 1.5, "capture_name": "decode"}
    figures, rest = split_fields("capture_progress", {"bs": [1, 2, 4], "steps_done": 3})
    assert figures is None and rest["bs"] == [1, 2, 4]  # a list of batch sizes (cuda_graph_bs's form) is no int


def test_a_row_of_another_kind_read_with_batch_rows_gets_its_figures() -> None:
    """rows() cuts the structs to the members some row holds; a kv_sizing row read together with batch rows
    keeps its fields null (not a dict of nulls hiding its figures)."""
    tl_text = SGL_TEXT + DECODE + "\n"
    ev = sglang.parse(tl_text, "tp0.log").events.filter(pl.col("kind").is_in(["kv_sizing", "decode_batch"]))
    rows = list(narrow_fields(ev).iter_rows(named=True))
    sizing = next(r for r in rows if r["kind"] == "kv_sizing")
    assert sizing["fields"] is None
    assert attrs(sizing)["context_len"] == 32768 and field(sizing, "max_running_requests") == 512


def test_a_chunk_of_batch_lines_holds_no_figures(parse) -> None:
    ev = parse(TEXT, "tp1.log").events
    assert ev.get_column("figures").null_count() == ev.height


def test_parquet_and_duckdb_read_the_figures_as_real_columns(tmp_path) -> None:
    log = tmp_path / "tp0.log"
    log.write_text(SGL_TEXT + TEXT)
    out = tmp_path / "t.parquet"
    write_parquet(build_timeline([log]), out)
    schema = pq.ParquetFile(out).schema
    leaves = {schema.column(i).path: schema.column(i).physical_type for i in range(len(schema))}
    assert leaves["figures.context_len"] == "INT64" and leaves["figures.during"] == "BYTE_ARRAY"
    assert leaves["fields.queue_req"] == "INT64"  # the documented columns stay
    back = pl.read_parquet(out)
    assert back.schema["figures"] == pl.Struct(FIGURES)
    duckdb = pytest.importorskip("duckdb")
    # docs/timeline.md's example
    got = duckdb.sql(f"SELECT kind, figures.context_len, figures.max_running_requests FROM '{out}' "
                     "WHERE kind = 'kv_sizing'").fetchall()
    assert got == [("kv_sizing", 32768, 512)]


def test_docs_list_every_typed_member_of_every_kind() -> None:
    """docs/timeline.md's tables of members name each kind's members (FIELDS_OF, FIGURES_OF), no more."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "timeline.md").read_text(encoding="utf-8")
    for title, of in (("### `fields`", FIELDS_OF), ("### `figures`", FIGURES_OF)):
        section = doc[doc.index(title):]
        table = section[section.index("| kinds |"):section.index("\n\n", section.index("| kinds |"))]
        listed: dict[str, set[str]] = {}
        for line in table.splitlines()[2:]:
            kinds, members = line.strip("|").split("|", 1)
            members = members.split("(a list", 1)[0].split("The rest", 1)[0]
            if "as `cuda_oom`" in members:
                members += " " + next(x for x in table.splitlines() if x.startswith("| `cuda_oom`"))
            names = set(re.findall(r"`([a-z_]+)`", members)) - set(of) - {"graph_capture", "weight_load",
                                                                           "forward", "init", "prefill", "decode"}
            for k in re.findall(r"`([a-z_]+)`", kinds):
                listed[k] = names
        assert listed == {k: set(v) for k, v in of.items()}, title


def test_a_streamed_log_keeps_its_rows_figures(tmp_path, monkeypatch) -> None:
    """Streamed chunks carry figures as one null unless a row fills them; the sample kept for the analysis
    still has every OOM row's figures, as the whole read has."""
    from forensics import inputs, timeline
    from tests.test_streaming import _write_set

    _write_set(tmp_path, 5)
    whole = build_timeline([tmp_path]).events
    monkeypatch.setattr(inputs.limits, "STREAM_BYTES", 10_000)
    monkeypatch.setattr(timeline, "CHUNK_BYTES", 9_999)
    streamed = build_timeline([tmp_path]).events
    typed = whole.filter(pl.col("figures").is_not_null())
    assert typed.height and set(typed.get_column("kind")) <= FIGURES_OF.keys()
    assert streamed.filter(pl.col("figures").is_not_null()).select("file", "line", "figures").equals(
        typed.select("file", "line", "figures"))
