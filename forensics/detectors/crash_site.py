"""Where a crash stopped, from its traceback: which process raised, the innermost frame and the call it was making,
and whether the model's forward pass had been entered.

Sources: sglang_formats.md §7 (``{Component} hit an exception: {traceback}`` for the Scheduler, the overlap
scheduler's forward thread ``TpModelWorkerClient``, ``DetokenizerManager``, ``TokenizerManager``,
``DataParallelController``; SGLang's ``--crash-dump-folder``, docs/advanced_features/server_arguments.md: "Folder
path to dump requests from the last 5 min before a crash"); failure_messages.md §4.3 (a traceback as CPython prints
it: ``File "…", line N, in func`` then the source line of the call) and §2.2 ("look at the frames").

SGL-RUN-001 uses it so that a crash whose exception line is missing still says what failed and where, and which fact
would decide — never a guess at a mechanism the frames do not support.

>>> s = crash_site('[x TP0] Scheduler hit an exception: Traceback (most recent call last):\\n'
...                '  File "/s/sglang/srt/managers/scheduler.py", line 504, in event_loop_overlap\\n'
...                '    batch = self.get_next_batch_to_run()\\n')
>>> s.component, s.func, s.call, s.in_forward
('Scheduler', 'event_loop_overlap', 'batch = self.get_next_batch_to_run()', False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from parsers.failures import reaches_model_forward, stage_of_frames

#: sglang_formats.md §7: the components that log ``… hit an exception``, in words an operator knows them by
COMPONENTS = {
    "Scheduler": "a scheduler (the per-GPU process that batches requests and runs the model)",
    "TpModelWorkerClient": "the model worker's forward thread (it only runs forward passes)",
    "DetokenizerManager": "the detokenizer (the CPU process that turns output token ids into text)",
    "TokenizerManager": "the tokenizer manager (the HTTP server's process that tokenizes requests)",
    "DataParallelController": "the data-parallel controller (it dispatches requests to the DP ranks)",
    "MultiTokenizerRouter": "the multi-tokenizer router",
    "MultiDetokenizerRouter": "the multi-detokenizer router",
}
_HIT = re.compile(r"\b([A-Z]\w{2,40}) hit an exception")
#: a frame and the source line CPython prints under it (failure_messages.md §4.3)
_FRAME_CALL = re.compile(r'File "([^"]{1,500})", line \d+, in (\w+)[^\n]*\n(?:[^\n]*?\] ?)?[ \t]*([^\n]*)')
_FRAME = re.compile(r'File "([^"]{1,500})", line \d+, in (\w+)')
_CARET = re.compile(r"^[\s^~]*$")
#: a call on the way into the forward pass (sglang managers/scheduler.py: ``run_event_loop`` → ``event_loop_*`` →
#: ``run_batch`` → ``tp_worker.forward_batch_generation``): a traceback cut at one of these says nothing yet about
#: whether the model was running
_TOWARD_FORWARD = re.compile(r"\b(?:run_batch|run_event_loop|dispatch_event_loop|event_loop_\w+|forward\w*|"
                             r"\w*model_worker|tp_worker|draft_worker)\b")
#: components that never run the model: what fails there is CPU-side, whatever the frames say
_CPU_SIDE = frozenset({"DetokenizerManager", "TokenizerManager", "DataParallelController", "MultiTokenizerRouter",
                       "MultiDetokenizerRouter"})


@dataclass(frozen=True)
class CrashSite:
    component: str | None  # the ``… hit an exception`` name, when the header is there
    file: str  # the innermost frame's file name
    func: str
    call: str | None  # the source line of the innermost frame (what it was calling)
    in_forward: bool  # the frames reach the model's forward pass
    stage: str | None  # parsers.failures.stage_of_frames

    @property
    def cpu_side(self) -> bool:
        return self.component in _CPU_SIDE


def crash_site(text: str) -> CrashSite | None:
    """The crash site of a traceback's text, or None when it holds no frame."""
    text = text[:200000]
    frames = _FRAME.findall(text)
    if not frames:
        return None
    head = _HIT.search(text[:2000])
    calls = _FRAME_CALL.findall(text)
    call = calls[-1][2].strip() if calls and calls[-1][1] == frames[-1][1] else None
    if call is not None and (not call or _CARET.match(call) or call.startswith("File ")):
        call = None
    path, func = frames[-1]
    return CrashSite(component=head.group(1) if head else None, file=path.rsplit("/", 1)[-1], func=func,
                     call=call[:160] if call else None, in_forward=reaches_model_forward(frames),
                     stage=stage_of_frames(frames))


def where(site: CrashSite) -> str:
    """The site in words: ``in get_next_batch_to_run (scheduler.py), at `…```."""
    return f"in {site.func} ({site.file})" + (f", at `{site.call}`" if site.call else "")


def outside_forward(site: CrashSite) -> str | None:
    """What the crash site rules out, or which failures the missing exception line would decide between; None when
    the frames say neither (a start-up traceback: its stage says where)."""
    if site.cpu_side:
        return ("it is a CPU-side process, which holds no model and no KV cache: not GPU memory, not a kernel — a "
                "request or output it could not handle (a tokenizer's error on the model's text, a malformed "
                "input), or a bug")
    if site.stage not in ("forward", None) or site.component not in ("Scheduler", "TpModelWorkerClient", None):
        return None
    if site.in_forward:
        return ("it was in the model's forward pass: the exception line decides between a CUDA out of memory outside "
                "the static pool and a kernel fault")
    if site.call is not None and not _TOWARD_FORWARD.search(site.call):
        return ("it never entered the model's forward pass: not the forward pass running out of GPU memory (the "
                "allocator fails where it allocates) — batch building, a request's grammar or input, the scheduler's "
                "own bookkeeping, or a kernel fault of an earlier step that CUDA reports late (kernel faults are "
                "reported asynchronously, at the next synchronisation)")
    return ("that call is on the way into the forward pass, before the frames say whether the model was "
            "running: the exception line decides between a failure of the forward pass (a CUDA out of memory, a "
            "kernel fault) and one of the scheduler's own")
