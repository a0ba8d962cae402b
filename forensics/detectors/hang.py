"""SGL-NCCL-004: the schedulers hung — the watchdog dumped them while no batch made progress.

SGLang's watchdog prints ``Scheduler debug info:`` (the batch each rank is stuck on, its pools) or
raises its timeout when a forward pass or a collective does not return. All ranks stuck on the same
request, with no batch line after the dump, is a hang inside the step: a collective some rank never
entered, or a kernel that does not finish. A py-spy dump of a controller while batches still flow is
the soft watchdog's noise, not a hang.
"""

from __future__ import annotations

from forensics.facts.launch import server_config
from forensics.facts.rows import Row, attrs, before, rank_of
from forensics.facts.runs import iter_runs, of_kind
from forensics.model import Finding, FlagChange, Timeline

from ._common import make_finding, tag_run


def _stuck_dumps(run: list[Row]) -> list[Row]:
    dumps = [r for r in of_kind(run, "notice") if attrs(r).get("message_id") == "watchdog_debug"
             and "Scheduler debug info" in (r.get("text") or "")]
    hard = [r for r in of_kind(run, "watchdog_timeout") if not attrs(r).get("soft")]
    return dumps + hard


def detect(tl: Timeline) -> list[Finding]:
    out: list[Finding] = []
    for ref, run in iter_runs(tl):
        stuck = _stuck_dumps(run)
        if not stuck:
            continue
        batches = of_kind(run, "decode_batch", "prefill_batch")
        first = min(stuck, key=lambda r: (r.get("file") or "", r.get("line") or 0))
        if any(before(first, b) for b in batches):
            continue  # batches after the dump: the server kept serving
        cfg = server_config(tl, run)
        ranks = sorted({x for x in (rank_of(r) for r in stuck) if x is not None})
        spec = cfg.get("speculative_algorithm") or cfg.get("speculative_algo")
        flags = []
        if spec:
            flags.append(FlagChange("--speculative-algorithm", str(spec), "(remove)",
                                    "a decode hang with every rank on one request: relaunch without speculative decoding "
                                    "to tell an engine-side divergence of the ranks from a fabric or hardware hang"))
        out.append(tag_run(make_finding(
            "SGL-NCCL-004",
            summary=(f"The scheduler watchdog found rank(s) {', '.join(map(str, ranks)) or '?'} stuck"
                     + (" on the same batch" if len(ranks) > 1 else "")
                     + " and no batch made progress after it: a hang inside the step (a collective some rank never "
                     "entered, or a kernel that does not return)"
                     + (f", with speculative decoding ({spec}) on" if spec else "") + "."),
            evidence=[*stuck[:6], *cfg.evidence_rows("speculative_algorithm", "speculative_algo")],
            confidence="medium",
            confidence_reason="the watchdog's dump shows where ranks waited, not why; no py-spy stack of a rank is in "
                              "the input",
            ranks=ranks,
            figures={"stuck_ranks": ranks, "dumps": len(stuck), "speculative_algorithm": spec},
            flags=flags,
            actions=["`py-spy dump --pid <scheduler pid>` on every rank while it hangs: the rank in a different frame "
                     "(not in the collective) is the culprit.",
                     "Check dmesg for Xids and `nvidia-smi` for a GPU at 100% with low power (a spinning kernel).",
                     "Compare the ranks' pool counters in the dump: ranks of one batch that disagree have diverged."],
        ), ref))
    return out
