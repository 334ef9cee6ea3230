"""bpftrace program generation.

The aggregation program keeps everything in kernel maps (counts, sums, stats, per-interval
maxima and log2 histograms) and prints them once per ``interval:ms:N`` tick, followed by a
``reveal-batch`` marker; ``END`` prints a last batch (``reveal-final``) and clears every map
so bpftrace prints nothing more. Nothing is printed per event.

Kernel-side keys are integers only (pid, tid, function id, clamped enum codes, dev_t) plus
``ntop`` addresses, so map keys never carry tenant text; names are resolved in user space.
Only attach paths validated by :func:`checked_path` and identifiers from
:mod:`~reveal.collect.ebpf.functions` are placed in a program.

Maps printed each interval (``P`` = pid, ``F`` = function id):

==============  ===================  ====================================================
map             key                  value
==============  ===================  ====================================================
``@calls``      P, F                 entries (cumulative count)
``@ret``        P, F                 completed calls: count and total latency ns (stats)
``@maxlat``     P, F                 max latency ns since the previous print (cleared)
``@lat``        P, F                 log2 histogram of latency ns (cumulative)
``@err``        P, F, code           calls returning a non-zero code (cumulative)
``@cpy``        P, F, kind           bytes requested per copy kind (cumulative)
``@cpyn``       P, F, kind           copies per copy kind (cumulative)
``@alloc``      P, F                 bytes allocated by successful allocations
``@free``       P, F                 bytes released (size remembered from the allocation)
``@nccl``       P, F, dtype          elements passed (count argument; cumulative)
``@py``         P                    Python function entries
``@tcp``        saddr, sport,        TCP retransmissions per flow
                daddr, dport
``@tcptask``    P                    TCP retransmissions by the task on CPU at the time
``@blk``        dev                  block requests: count and total latency ns (stats)
``@blkmax``     dev                  max block latency ns since the previous print
``@blkhist``    dev                  log2 histogram of block latency ns
``@rq``         (none)               run-queue waits: count and total ns (stats)
``@rqmax``      (none)               max run-queue wait ns since the previous print
``@rqhist``     (none)               log2 histogram of run-queue wait ns
==============  ===================  ====================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from reveal.collect.ebpf.functions import (
    COPY_KIND_INVALID,
    ERROR_CODE_MAX,
    FUNCTION_IDS,
    NCCL_DTYPE_INVALID,
    TracedFunction,
)

ATTACHED_MARKER = "reveal-attached"  # printed by BEGIN, which runs once every probe is attached
BATCH_MARKER = "reveal-batch"
FINAL_MARKER = "reveal-final"
EVENT_PREFIX = "E"

TRACEPOINT_GROUPS = ("tcp", "block", "sched")
PYTHON_SOURCES = ("usdt", "eval_frame")
EVAL_FRAME_SYMBOL = "_PyEval_EvalFrameDefault"

#: Maps cleared after each print: per-interval maxima.
INTERVAL_MAPS = frozenset({"maxlat", "blkmax", "rqmax"})

_SAFE_ATTACH = re.compile(r"^(/[A-Za-z0-9._+@/-]+|/proc/[0-9]+/map_files/[0-9a-f]+-[0-9a-f]+)$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TASK_RUNNING_MASK = 0xFF  # prev_state bits; 0 means preempted while runnable


def checked_path(path: str) -> str:
    """``path`` when it is safe inside a quoted bpftrace attach point, else ValueError."""
    if not _SAFE_ATTACH.match(path) or "/../" in path + "/":
        raise ValueError(f"unsafe attach path {path!r}")
    return path


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"unsafe identifier {name!r}")
    return name


@dataclass(frozen=True)
class LibraryPlan:
    """One library file and the traced functions it exports."""

    attach: str
    functions: tuple[TracedFunction, ...]


@dataclass(frozen=True)
class InterpreterPlan:
    """One Python interpreter file and how its function entries are seen."""

    attach: str
    source: str  # usdt | eval_frame


@dataclass(frozen=True)
class ProgramPlan:
    """Everything an aggregation program depends on; equal plans give equal programs."""

    libraries: tuple[LibraryPlan, ...] = ()
    interpreters: tuple[InterpreterPlan, ...] = ()
    tracepoints: frozenset[str] = frozenset()
    interval_ms: int = 100
    launch_latency: bool = True  # False: launches are counted at entry only (no uretprobe)

    @property
    def empty(self) -> bool:
        return not (self.libraries or self.tracepoints)


@dataclass
class _Program:
    probes: list[str] = field(default_factory=list)
    printed: list[str] = field(default_factory=list)  # maps printed each interval, in order
    helpers: set[str] = field(default_factory=set)  # maps used but never printed

    def use(self, name: str) -> None:
        if name not in self.printed:
            self.printed.append(name)


def _copy_kind(fn: TracedFunction) -> str:
    """The copy kind of a memcpy call: its argument (over 4: ``COPY_KIND_INVALID``), or
    the kind the function's name fixes."""
    if fn.kind_arg is None:
        return str(int(fn.kind or 0))
    raw = f"(uint32)arg{fn.kind_arg}"
    return f"({raw} > 4 ? {COPY_KIND_INVALID} : {raw})"


def _nccl_dtype(fn: TracedFunction) -> str:
    """The datatype argument of an NCCL call (out of range: ``NCCL_DTYPE_INVALID``)."""
    raw = f"(uint32)arg{fn.dtype_arg}"
    return f"({raw} > {NCCL_DTYPE_INVALID - 1} ? {NCCL_DTYPE_INVALID} : {raw})"


def _entry_body(fn: TracedFunction, fid: int, python: bool, timed: bool,
                prog: _Program) -> list[str]:
    body = [f"@calls[pid, {fid}] = count();"]
    prog.use("calls")
    if timed:
        body.insert(0, f"@ts[tid, {fid}] = nsecs;")
        prog.helpers.add("ts")
    if python:
        body.append("@cudapid[pid] = 1;")
        prog.helpers.add("cudapid")
    if fn.role == "memcpy":
        kind = _copy_kind(fn)
        body.append(f"@cpy[pid, {fid}, {kind}] = sum(arg{fn.bytes_arg});")
        body.append(f"@cpyn[pid, {fid}, {kind}] = count();")
        prog.use("cpy")
        prog.use("cpyn")
    elif fn.role == "malloc":
        body.append(f"@mptr[tid, {fid}] = arg{fn.ptr_arg};")
        body.append(f"@msz[tid, {fid}] = arg{fn.bytes_arg};")
        prog.helpers.update({"mptr", "msz", "live"})
    elif fn.role == "free":
        body.append(f"$s = @live[pid, arg{fn.ptr_arg}];")
        body.append(f"if ($s) {{ @free[pid, {fid}] = sum($s); "
                    f"delete(@live[pid, arg{fn.ptr_arg}]); }}")
        prog.helpers.add("live")
        prog.use("free")
    elif fn.role == "nccl":
        body.append(f"@nccl[pid, {fid}, {_nccl_dtype(fn)}] = sum(arg{fn.bytes_arg});")
        prog.use("nccl")
    return body


def _latency(prog: _Program, stats: str, longest: str, hist: str, key: str = "") -> list[str]:
    """Statements adding the duration ``$d`` (ns) to the printed maps ``stats`` (count,
    average, total), ``longest`` (max) and ``hist`` (log2 histogram), indexed by ``key``."""
    index = f"[{key}]" if key else ""
    for name in (stats, longest, hist):
        prog.use(name)
    return [f"@{stats}{index} = stats($d);", f"@{longest}{index} = max($d);",
            f"@{hist}{index} = hist($d);"]


def _return_body(fn: TracedFunction, fid: int, prog: _Program) -> list[str]:
    body = [
        f"$d = nsecs - @ts[tid, {fid}];",
        f"delete(@ts[tid, {fid}]);",
        *_latency(prog, "ret", "maxlat", "lat", f"pid, {fid}"),
        "$r = (int32)retval;",
        f"if ($r != 0) {{ @err[pid, {fid}, ($r < 0 || $r > {ERROR_CODE_MAX}) ? "
        f"{ERROR_CODE_MAX} : $r] = count(); }}",
    ]
    prog.use("err")
    if fn.role == "malloc":
        body.append(f"if ($r == 0) {{ $p = *(uint64 *)@mptr[tid, {fid}]; "
                    f"@live[pid, $p] = @msz[tid, {fid}]; "
                    f"@alloc[pid, {fid}] = sum(@msz[tid, {fid}]); }}")
        body.append(f"delete(@mptr[tid, {fid}]); delete(@msz[tid, {fid}]);")
        prog.use("alloc")
    return body


def _block(head: str, body: list[str]) -> str:
    return head + " {\n  " + "\n  ".join(body) + "\n}"


def _library_probes(plan: ProgramPlan, prog: _Program) -> None:
    python = bool(plan.interpreters)
    for library in plan.libraries:
        path = checked_path(library.attach)
        for fn in library.functions:
            fid = FUNCTION_IDS[fn.name]
            name = _ident(fn.name)
            timed = plan.launch_latency or not fn.is_launch
            prog.probes.append(_block(f'uprobe:"{path}":{name}',
                                      _entry_body(fn, fid, python, timed, prog)))
            if timed:
                prog.probes.append(_block(f'uretprobe:"{path}":{name} /@ts[tid, {fid}]/',
                                          _return_body(fn, fid, prog)))


def _python_probes(plan: ProgramPlan, prog: _Program) -> None:
    for interp in plan.interpreters:
        path = checked_path(interp.attach)
        if interp.source == "usdt":
            head = f'usdt:"{path}":python:function__entry'
        elif interp.source == "eval_frame":
            head = f'uprobe:"{path}":{EVAL_FRAME_SYMBOL}'
        else:
            raise ValueError(f"unknown Python source {interp.source!r}")
        prog.probes.append(_block(head + " /@cudapid[pid]/", ["@py[pid] = count();"]))
        prog.use("py")


def _tracepoint_probes(groups: frozenset[str], prog: _Program) -> None:
    if "tcp" in groups:
        prog.probes.append(_block("tracepoint:tcp:tcp_retransmit_skb", [
            "if (args->family == 2) {",
            "  @tcp[ntop(args->saddr), args->sport, ntop(args->daddr), args->dport] = count();",
            "} else {",
            "  @tcp[ntop(args->saddr_v6), args->sport, ntop(args->daddr_v6), args->dport]"
            " = count();",
            "}",
            "@tcptask[pid] = count();",
        ]))
        prog.use("tcp")
        prog.use("tcptask")
    if "block" in groups:
        prog.probes.append(_block("tracepoint:block:block_rq_issue",
                                  ["@blkts[args->dev, args->sector] = nsecs;"]))
        prog.probes.append(_block(
            "tracepoint:block:block_rq_complete /@blkts[args->dev, args->sector]/", [
                "$d = nsecs - @blkts[args->dev, args->sector];",
                "delete(@blkts[args->dev, args->sector]);",
                *_latency(prog, "blk", "blkmax", "blkhist", "args->dev"),
            ]))
        prog.helpers.add("blkts")
    if "sched" in groups:
        prog.probes.append(_block(
            "tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new",
            ["@rqts[args->pid] = nsecs;"]))
        prog.probes.append(_block("tracepoint:sched:sched_switch", [
            f"if (args->prev_pid != 0 && (args->prev_state & {_TASK_RUNNING_MASK}) == 0) "
            "{ @rqts[args->prev_pid] = nsecs; }",
            "$t = @rqts[args->next_pid];",
            "if ($t) {",
            "  $d = nsecs - $t;",
            *(f"  {line}" for line in _latency(prog, "rq", "rqmax", "rqhist")),
            "  delete(@rqts[args->next_pid]);",
            "}",
        ]))
        prog.helpers.add("rqts")


def _prints(prog: _Program) -> list[str]:
    lines = []
    for name in prog.printed:
        lines.append(f"print(@{name});")
        if name in INTERVAL_MAPS:
            lines.append(f"clear(@{name});")
    return lines


def aggregation_program(plan: ProgramPlan) -> str:
    """The bpftrace program text for ``plan`` (empty plan: ValueError)."""
    if plan.empty:
        raise ValueError("nothing to trace")
    if plan.interval_ms < 10:
        raise ValueError(f"interval {plan.interval_ms} ms is below 10 ms")
    unknown = set(plan.tracepoints) - set(TRACEPOINT_GROUPS)
    if unknown:
        raise ValueError(f"unknown tracepoint groups {sorted(unknown)}")
    prog = _Program()
    _library_probes(plan, prog)
    if plan.libraries:
        _python_probes(plan, prog)
    _tracepoint_probes(plan.tracepoints, prog)
    tick = [*_prints(prog), f'printf("{BATCH_MARKER}\\n");']
    end = [f"print(@{name});" for name in prog.printed]
    end.append(f'printf("{FINAL_MARKER}\\n");')
    end.extend(f"clear(@{name});" for name in [*prog.printed, *sorted(prog.helpers)])
    return "\n".join([
        _block("BEGIN", [f'printf("{ATTACHED_MARKER}\\n");']),
        *prog.probes,
        _block(f"interval:ms:{int(plan.interval_ms)}", tick),
        _block("END", end),
    ]) + "\n"


# -- per-event capture -------------------------------------------------------------------

def _capture_entry(fn: TracedFunction, fid: int) -> list[str]:
    """Entry statements: start time, the argument worth keeping (``@ca``: bytes or element
    count) and its qualifier (``@ck``: copy kind or datatype code)."""
    value, aux = "0", "0"
    if fn.role in ("memcpy", "malloc", "nccl"):
        value = f"arg{fn.bytes_arg}"
    if fn.role == "memcpy":
        aux = _copy_kind(fn)
    elif fn.role == "nccl":
        aux = _nccl_dtype(fn)
    elif fn.role == "free":
        value = f"@live[pid, arg{fn.ptr_arg}]"
    body = [f"@ct[tid, {fid}] = nsecs;", f"@ca[tid, {fid}] = {value};",
            f"@ck[tid, {fid}] = {aux};"]
    if fn.role in ("malloc", "free"):
        body.append(f"@cp[tid, {fid}] = arg{fn.ptr_arg};")
    return body


def _capture_return(fn: TracedFunction, fid: int, count: list[str]) -> list[str]:
    body = [
        f'printf("{EVENT_PREFIX} call %d %d {fid} %lld %lld %lld %lld %d\\n", pid, tid, '
        f"@ct[tid, {fid}], nsecs, @ca[tid, {fid}], @ck[tid, {fid}], (int32)retval);",
    ]
    if fn.role == "malloc":
        body.append(f"if ((int32)retval == 0) {{ @live[pid, *(uint64 *)@cp[tid, {fid}]] = "
                    f"@ca[tid, {fid}]; }}")
    elif fn.role == "free":
        body.append(f"delete(@live[pid, @cp[tid, {fid}]]);")
    if fn.role in ("malloc", "free"):
        body.append(f"delete(@cp[tid, {fid}]);")
    body.append(f"delete(@ct[tid, {fid}]); delete(@ca[tid, {fid}]); delete(@ck[tid, {fid}]);")
    return body + count


def capture_program(libraries: tuple[LibraryPlan, ...], tracepoints: frozenset[str],
                    duration_ms: int, max_events: int) -> str:
    """A bounded per-event program: one ``E`` line per completed call (and per block I/O
    or TCP retransmission), exiting after ``duration_ms`` or about ``max_events`` lines.

    Line fields: ``E kind pid tid fid start_ns end_ns arg aux ret`` where ``kind`` is
    ``call`` (arg = bytes or elements, aux = copy kind or datatype code), ``blk`` (pid =
    dev_t, arg = bytes, ret = error) or ``tcp`` (pid/tid of the task on CPU, arg = sport,
    aux = dport).
    """
    if duration_ms < 1 or max_events < 1:
        raise ValueError("duration and event limit must be positive")
    probes: list[str] = []
    maps = {"events"}
    count = [f"@events = @events + 1; if (@events >= {int(max_events)}) {{ exit(); }}"]
    for library in libraries:
        path = checked_path(library.attach)
        for fn in library.functions:
            fid = FUNCTION_IDS[fn.name]
            name = _ident(fn.name)
            probes.append(_block(f'uprobe:"{path}":{name}', _capture_entry(fn, fid)))
            probes.append(_block(f'uretprobe:"{path}":{name} /@ct[tid, {fid}]/',
                                 _capture_return(fn, fid, count)))
            maps.update({"ct", "ca", "ck"})
            if fn.role in ("malloc", "free"):
                maps.update({"cp", "live"})
    if "block" in tracepoints:
        probes.append(_block("tracepoint:block:block_rq_issue",
                             ["@bt[args->dev, args->sector] = nsecs;",
                              "@bb[args->dev, args->sector] = args->bytes;"]))
        probes.append(_block(
            "tracepoint:block:block_rq_complete /@bt[args->dev, args->sector]/", [
                f'printf("{EVENT_PREFIX} blk %d 0 0 %lld %lld %lld 0 %d\\n", args->dev, '
                "@bt[args->dev, args->sector], nsecs, @bb[args->dev, args->sector], "
                "args->error);",
                "delete(@bt[args->dev, args->sector]); delete(@bb[args->dev, args->sector]);",
                *count,
            ]))
        maps.update({"bt", "bb"})
    if "tcp" in tracepoints:
        probes.append(_block("tracepoint:tcp:tcp_retransmit_skb", [
            f'printf("{EVENT_PREFIX} tcp %d %d 0 %lld %lld %d %d 0\\n", pid, tid, nsecs, '
            "nsecs, args->sport, args->dport);",
            *count,
        ]))
    if not probes:
        raise ValueError("nothing to capture")
    probes.insert(0, _block("BEGIN", [f'printf("{ATTACHED_MARKER}\\n");']))
    probes.append(_block(f"interval:ms:{int(duration_ms)}", ["exit();"]))
    probes.append(_block("END", [f'printf("{FINAL_MARKER}\\n");',
                                 *(f"clear(@{name});" for name in sorted(maps))]))
    return "\n".join(probes) + "\n"
