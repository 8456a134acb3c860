"""The analysis: align every rank's records, trace, stacks and flight recorder by step and
collective sequence number, and name the rank that diverged (stdlib only).

Never by wall clock: node clocks drift. Each rank is placed by the step and phase of its last
beat (heartbeat trace, failure record), by where its main thread stood (stacks file) and by the
highest collective sequence number it entered (flight recorder). The order of reasoning:

1. every rank finished -> no culprit; the launcher got SIGTERM -> ``preempted``;
2. a ``config`` or ``exception`` record -> that rank (its peers' broken collectives follow);
3. a collective mismatch -> the rank whose collective at the parting sequence number differs from
   its peers' (gloo's size-mismatch abort, or flight-recorder entries that disagree);
4. a rank that died by a signal without a record -> ``died`` (an NCCL watchdog teardown is not a
   death but a communication failure: that rank only waited; nor is a rank ended by the hard
   stop's SIGALRM or torchrun's SIGTERM while another rank vanished by another cause);
5. a rank ended by the hard stop -> ``gil-starved``;
6. otherwise a hang: the ranks that never entered the collective their peers entered (flight
   recorder), confirmed by a main thread outside any collective (stacks), else the ranks outside
   the ``step`` phase or furthest behind (trace). Ranks that only waited are named as waiting.

Missing or truncated evidence lowers the confidence and is said in ``notes``.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from collections.abc import Iterable, Mapping

from ..catalogue import match_decision
from .compare import first_disagreement, odd_ones
from .flightrec import Collective, FRInfo
from .load import Generation
from .model import Culprit, Diagnosis, RankState
from .ranks import (
    FR_ALL_LIMIT,
    FR_SAMPLE,
    OUTSIDE_PHASES,
    RankEnd,
    classify_ranks,
    file_name,
    lower,
    world_of,
)
from .stacks import Frame
from .torchrun import (
    MISMATCH_PATTERNS,
    NCCL_TEARDOWN_PATTERNS,
    find_line,
    signal_name,
    worker_exits,
)

_TB_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
#: Exits of a rank that waited for a dead peer: SIGALRM is the runtime's hard stop (its alarm ends a
#: rank stuck in one C call past its budget, docs/runtime.md), SIGTERM torchrun's teardown of the
#: survivors (``PContext.close``); torchrun prints a signal negative, a shell wrapper's 128 + N, and
#: 142/143 are also the runtime's own hang and teardown exits. Where another rank vanished by a
#: different cause, that one died.
_AFTERMATH_EXITS = tuple(code for sig in (signal.SIGALRM, signal.SIGTERM) for code in (-sig, 128 + sig))


class _Analysis:
    def __init__(self, gen: Generation, logs: Mapping[int | None, list[str]], finished: set[int | None],
                 fr_limit: int) -> None:
        self.gen = gen
        self.notes: list[str] = []
        self.logs = logs
        all_lines = [line for lines in logs.values() for line in lines]
        self.lines = all_lines
        exits: dict[int, int] = {}
        for lines in logs.values():
            exits.update(worker_exits(lines))
        node_done: dict[int | None, dict] = {a.node: (a.record or {}) for a in gen.attempts}
        self.node_records = node_done
        self.ranks = classify_ranks(gen, exits, node_done, finished)
        self.world = max((world_of(d) for d in gen.ranks.values()), default=0) or None
        self.fr_limit = fr_limit

    # -- helpers --------------------------------------------------------------------------------
    def rank_line(self, r: RankEnd) -> str:
        where = f"step {r.step}, phase {r.phase or 'unknown'}" if r.step is not None else "no beat recorded"
        node = f" on node {r.d.node}" if r.d.node is not None else ""
        return f"rank {r.rank}{node} ({where})"

    def culprit(self, kind: str, r: RankEnd | None, evidence: list[str], confidence: str, summary: str,
                frame: Frame | None = None, collective: dict | None = None,
                sig: str | None = None) -> Culprit:
        c = Culprit(kind, r.rank if r else None, r.d.node if r else None, r.phase if r else None,
                    r.step if r else None, evidence, confidence, summary,
                    frame.where() if frame else None, collective, sig)
        row = match_decision(kind, c.phase, sig)
        c.decision = row.trigger if row else None
        return c

    def fr(self, ranks: Iterable[RankEnd]) -> dict[int, FRInfo]:
        out = {}
        for r in ranks:
            info = r.d.flight_recorder()
            out[r.rank] = info
        return out

    def stack_evidence(self, r: RankEnd) -> tuple[list[str], Frame | None]:
        s = r.d.stacks
        if s is None or not s.frames:
            self.notes.append(f"rank {r.rank}: no stack dump ({file_name(r.d, 'stacks', 'txt')} "
                              f"{'empty' if s else 'missing'})")
            return [], None
        frame = s.stalled_frame()
        state = "waiting in a collective" if s.waiting else "outside any collective"
        what = ("hard-stop dump" if s.hard_stop else f"fatal signal dump ({s.fatal})" if s.fatal
                else "watchdog dump" if s.soft else "stack dump")
        return [f"{file_name(r.d, 'stacks', 'txt')} ({what}): main thread {state} at "
                f"{frame.where() if frame else '?'}"], frame

    def record_evidence(self, r: RankEnd) -> list[str]:
        rec = r.d.failure
        if not rec:
            last = r.d.last
            if last:
                return [f"{file_name(r.d, 'trace', 'jsonl')}: last beat at step {last.get('step')} in phase "
                        f"{last.get('phase')}"]
            return []
        msg = str(rec.get("message") or rec.get("exception") or "")[:240]
        return [f"{file_name(r.d, 'failure', 'json')}: {rec.get('kind')} at step {rec.get('step')} in phase "
                f"{rec.get('phase')}" + (f": {msg}" if msg else "")]

    # -- the steps ------------------------------------------------------------------------------
    def run(self) -> tuple[list[Culprit], dict[int, str]]:
        ranks = self.ranks
        roles: dict[int, str] = {}
        if not ranks:
            return [], roles
        kinds = Counter(r.kind for r in ranks.values())
        if set(kinds) <= {"done"}:
            return [], {r: "done" for r in ranks}
        preempted = [n for n, rec in self.node_records.items()
                     if rec.get("exit_name") in ("preempted", "interrupted")]
        if preempted or (kinds.get("preempted") and set(kinds) <= {"preempted", "done", "terminated"}):
            ev = [f"run-node{n}.json: exit {self.node_records[n].get('exit_code')} "
                  f"({self.node_records[n].get('exit_name')}): {self.node_records[n].get('exit_reason')}"
                  for n in preempted]
            ev += [line for r in ranks.values() if r.kind == "preempted" for line in self.record_evidence(r)][:4]
            c = self.culprit("preempted", None, ev, "high",
                             "the pod was preempted or deleted (SIGTERM): no rank is at fault")
            c.node = preempted[0] if preempted else None
            return [c], {r: "preempted" for r in ranks}
        for kind in ("config", "exception"):
            bad = [r for r in ranks.values() if r.kind == kind]
            if bad:
                return [self._record_culprit(kind, r) for r in bad], self._roles(bad)
        found = self._mismatch()
        if found:
            return found, self._roles([ranks[c.rank] for c in found if c.rank is not None])
        died = [r for r in ranks.values() if r.kind == "vanished" and not self._nccl_teardown(r)]
        first = [r for r in died if r.exit not in _AFTERMATH_EXITS]
        if first and len(first) < len(died):  # the others were ended while they waited for it
            for r in died:
                if r not in first:
                    self.notes.append(f"rank {r.rank}: ended by {signal_name(r.exit or 0)} without a record "
                                      "after another rank died (the hard stop or torchrun's teardown while "
                                      "it waited): not named")
            died = first
        if died:
            return [self._died(r) for r in died], self._roles(died)
        hard = [r for r in ranks.values() if r.kind == "hang-hard"]
        # a hard-stopped rank whose main thread waited in a collective only waited (its watchdog
        # thread was slow, not its main thread) when another hard-stopped rank stood outside one
        outside = [r for r in hard if r.d.stacks is not None and r.d.stacks.waiting is False]
        hard = outside or hard
        if hard:
            return [self._gil(r) for r in hard], self._roles(hard)
        if all(r.kind in ("running", "unreadable") for r in ranks.values()):  # no evidence to judge
            return [], {r: ("running" if x.kind == "running" else "unreadable") for r, x in ranks.items()}
        return self._hang()

    def _roles(self, culprits: list[RankEnd]) -> dict[int, str]:
        bad = {r.rank for r in culprits}
        out = {}
        for rank, r in self.ranks.items():
            if rank in bad:
                out[rank] = "culprit"
            elif r.kind == "terminated":
                out[rank] = "torn-down"
            elif r.kind == "done":
                out[rank] = "done"
            else:
                out[rank] = "waiting"
        return out

    def _record_culprit(self, kind: str, r: RankEnd) -> Culprit:
        rec = r.d.failure or {}
        ev = self.record_evidence(r)
        frame = None
        tb = str(rec.get("traceback") or "")
        frames = _TB_FRAME.findall(tb)
        if frames:
            f, n, fn = frames[-1]
            frame = Frame(f, int(n), fn)
            ev.append(f"{file_name(r.d, 'failure', 'json')} traceback: raised at {frame.where()}")
        what = rec.get("exception") or rec.get("message") or kind
        return self.culprit(kind, r, ev, "high", f"{self.rank_line(r)} raised {what}"[:300]
                            if kind == "exception" else f"{self.rank_line(r)} refused its configuration: {what}",
                            frame)

    def _nccl_teardown(self, r: RankEnd) -> bool:
        if r.exit is None or r.exit != -6:
            return False
        return find_line(self.logs.get(r.d.node, []), NCCL_TEARDOWN_PATTERNS) is not None

    def _died(self, r: RankEnd) -> Culprit:
        sig = signal_name(r.exit) if r.exit is not None else None
        ev = []
        if r.exit is not None:
            ev.append(f"run-node{r.d.node}.json (torchrun's failure summary): rank {r.rank} exitcode {r.exit}"
                      + (f" ({sig})" if sig else ""))
        else:
            ev.append(f"rank {r.rank} wrote a start record but no failure record, and torchrun's summary "
                      "does not name its exit")
        ev += self.record_evidence(r)
        if r.d.failure is None:
            ev.append("(without a record the step comes from the trace, which the watchdog thread writes "
                      "every quarter budget: it may lag the rank's last step)")
        frame = None
        if r.d.stacks is not None and r.d.stacks.fatal:
            more, frame = self.stack_evidence(r)
            ev += more
        conf = "high" if r.exit is not None else "medium"
        why = {"SIGKILL": " (the OOM killer or an eviction?)"}.get(sig or "", "")
        return self.culprit("died", r, ev, conf,
                            f"{self.rank_line(r)} died by {sig or 'an unknown cause'}{why} without a record; "
                            "its peers' collective errors follow from it", frame, sig=sig)

    def _gil(self, r: RankEnd) -> Culprit:
        ev = [f"{file_name(r.d, 'stacks', 'txt')}: the hard stop's 'Timeout (' dump: the watchdog thread "
              "starved, the kernel ended the rank with SIGALRM"]
        more, frame = self.stack_evidence(r)
        ev += more + self.record_evidence(r)
        if r.exit is not None:
            ev.append(f"torchrun's failure summary: rank {r.rank} exitcode {r.exit} ({signal_name(r.exit)})")
        return self.culprit("gil-starved", r, ev, "high" if frame else "medium",
                            f"{self.rank_line(r)} held the GIL in one C call past its budget; the hard stop "
                            "ended it", frame, sig="SIGALRM")

    # -- collective mismatch --------------------------------------------------------------------
    def _selected_fr(self, suspects: Iterable[int]) -> dict[int, FRInfo]:
        ranks = list(self.ranks.values())
        if len(ranks) <= self.fr_limit:
            chosen = ranks
        else:
            want = set(suspects)
            chosen = [r for r in ranks if r.rank in want]
            chosen += [r for r in ranks if r.rank not in want][:FR_SAMPLE]
            self.notes.append(f"flight recorder read for {len(chosen)} of {len(ranks)} ranks (the suspects "
                              f"and {FR_SAMPLE} others; beyond {self.fr_limit} ranks not every dump is read)")
        return self.fr(chosen)

    def _suspect_ranks(self) -> list[int]:
        rs = list(self.ranks.values())
        steps = [r.step for r in rs if r.step is not None]
        low = min(steps) if steps else None
        return [r.rank for r in rs if r.kind in ("vanished", "hang-hard", "exception") or r.phase in OUTSIDE_PHASES
                or (r.step is not None and r.step == low) or (r.d.stacks is not None and r.d.stacks.waiting is False)]

    def _mismatch(self) -> list[Culprit]:
        line = find_line(self.lines, MISMATCH_PATTERNS)
        frs = self._selected_fr(self._suspect_ranks())
        self._frs = frs
        ok = {r: f for r, f in frs.items() if f.status == "ok" and f.entries}
        seq = first_disagreement(ok)
        if line is None and seq is None:
            return []
        sites: dict[int, tuple[Frame | None, str, str]] = {}  # rank -> (site, op, sizes)
        for rank, r in self.ranks.items():
            f = ok.get(rank)
            entry: Collective | None = None
            if f is not None:
                entry = f.at(seq) if seq is not None else f.open()
                if entry is None and seq is None:
                    entry = f.entries[-1]
            if entry is not None:
                sites[rank] = (entry.site(), entry.op, str(entry.in_sizes))
            elif r.d.stacks is not None and r.d.stacks.frames and (r.d.stacks.fatal or r.kind == "vanished"):
                frames = r.d.stacks.frames
                op = next((fr.func for fr in frames if "/torch/distributed/" in fr.file
                           and fr.func not in ("wrapper",)), "?")
                sites[rank] = (r.d.stacks.task_frame(), op, "?")
        if seq is None:  # gloo's abort: the survivors' open collective is the one that parted
            # (the entry that failed on a survivor: open, or its last, retired by the error)
            open_seqs = [(e.seq if (e := f.open()) is not None else f.last_seq) for f in ok.values()]
            hint = min(open_seqs) if open_seqs else None
        else:
            hint = seq
        culprits = odd_ones(sites, ok)
        reason = "majority"
        if not culprits:
            culprits = [rk for rk, (site, _, _) in sites.items() if site and not site.in_runtime]
            reason = "task-code"
            if len(culprits) == len(sites):
                culprits = []
        if not culprits:
            culprits = [rk for rk, r in self.ranks.items() if r.exit == -6]
            reason = "abort"
        if not culprits:
            culprits = sorted(sites) or sorted(self.ranks)
            reason = "unknown"
        out = []
        for rank in culprits:
            r = self.ranks[rank]
            site, op, sizes = sites.get(rank, (None, "?", "?"))
            ev = []
            if line:
                ev.append(f"log ({'run-node' + str(r.d.node) + '.json failure_log_tail' if r.d.node is not None else 'output'}): {line}")
            if r.exit is not None:
                ev.append(f"torchrun's failure summary: rank {rank} exitcode {r.exit} ({signal_name(r.exit)})")
            collective: dict = {"seq": hint, "op": op, "sizes": sizes,
                                "site": site.where() if site else None, "peers": []}
            for other, (osite, oop, osizes) in sorted(sites.items()):
                if other == rank:
                    continue
                collective["peers"].append({"rank": other, "op": oop, "sizes": osizes,
                                            "site": osite.where() if osite else None})
                ev.append(f"rank {other} issued {oop} {osizes} at {osite.where() if osite else '?'}"
                          + (f" (flight recorder #{seq})" if seq is not None and other in ok else ""))
            ev.insert(0, f"rank {rank} issued {op} {sizes} at {site.where() if site else '?'}"
                      + (f" (flight recorder #{seq})" if seq is not None and rank in ok else
                         " (its stack at the abort)" if r.d.stacks and r.d.stacks.fatal else ""))
            if reason == "task-code" and len(self.ranks) == 2:
                ev.append("with two ranks an extra collective on one and a missing one on the other look "
                          "alike: named the rank whose collective comes from the task's own code")
            ev += self.record_evidence(r)
            if r.d.failure is None:
                ev.append("(without a record the step comes from the trace, which the watchdog thread "
                          "writes every quarter budget: it may lag the rank's last step)")
            conf = {"majority": "high", "task-code": "high", "abort": "medium", "unknown": "low"}[reason]
            if seq is None and line is not None and not any(rk in ok for rk in sites):
                conf = lower(conf)
            peer_steps = [st for k in sites if k != rank and self.ranks[k].d.failure
                          and (st := self.ranks[k].step) is not None]
            if r.d.failure is None and peer_steps and (r.step is None or max(peer_steps) > r.step):
                # aligned by collective sequence: at the parting collective it had done its peers' steps
                ev.append(f"step {max(peer_steps)} taken from its peers at the same collective sequence "
                          f"number (its own trace ends at step {r.step}, phase {r.phase})")
                r.step, r.phase = max(peer_steps), None
            seqtxt = f" at collective #{hint}" if hint is not None else ""
            out.append(self.culprit(
                "collective-mismatch", r, ev, conf,
                f"collective mismatch{seqtxt}: {self.rank_line(r)} issued {op} {sizes} while its peers issued "
                + ", ".join(sorted({f"{o} {s}" for k, (_, o, s) in sites.items() if k != rank})) or "?",
                site, collective))
        return out

    # -- hang -----------------------------------------------------------------------------------
    def _hang(self) -> tuple[list[Culprit], dict[int, str]]:
        ranks = self.ranks
        frs = getattr(self, "_frs", None) or self._selected_fr(self._suspect_ranks())
        ok = {r: f for r, f in frs.items() if f.status == "ok"}
        for rank, f in sorted(frs.items()):
            if f.status != "ok":
                self.notes.append(f"rank {rank}: {f.note}")
        parting: int | None = None
        behind: list[int] = []
        collective = None
        if len(ok) >= 2:
            last = {r: f.last_seq for r, f in ok.items()}
            if len(set(last.values())) > 1:
                low = min(last.values())
                parting = low + 1
                behind = sorted(r for r, s in last.items() if s == low)
                ahead = next(r for r, s in last.items() if s > low)
                entry = ok[ahead].at(parting)
                if entry is not None:
                    collective = {"seq": parting, "op": entry.op, "sizes": str(entry.in_sizes),
                                  "site": (s.where() if (s := entry.site()) else None),
                                  "entered_by": sorted(r for r, s in last.items() if s > low),
                                  "not_entered_by": behind}
        busy = sorted(r for r, x in ranks.items() if x.d.stacks is not None and x.d.stacks.waiting is False
                      and x.kind not in ("done",))
        waiting_stack = {r for r, x in ranks.items() if x.d.stacks is not None and x.d.stacks.waiting}
        conf = "high"
        if behind:
            agree = [r for r in behind if r in busy]
            cands = agree or [r for r in behind if r not in waiting_stack] or behind
            if not agree:
                conf = "medium"
        elif busy:
            cands, conf = busy, "medium"
        else:
            steps = [x.step for x in ranks.values() if x.step is not None]
            outside = [r for r, x in ranks.items() if x.phase in OUTSIDE_PHASES]
            low = min(steps) if steps else None
            lowest = [r for r, x in ranks.items() if x.step == low]
            cands = outside or (lowest if low is not None and len(lowest) < len(ranks) else [])
            conf = "low"
            if not cands:
                return self._comm(), {r: "waiting" for r in ranks}
        if len(ok) < len(ranks) and len(ranks) <= self.fr_limit:
            conf = lower(conf)
            self.notes.append(f"confidence lowered: {len(ranks) - len(ok)} of {len(ranks)} flight-recorder "
                              "dumps missing or unreadable")
        out = []
        for rank in cands:
            r = ranks[rank]
            ev = self.record_evidence(r)
            more, frame = self.stack_evidence(r)
            ev = more + ev
            if frame is None and r.d.stacks is None:
                conf = lower(conf)
            if collective is not None:
                ev.append(f"{file_name(r.d, 'fr', 'pkl')}: last collective #{ok[rank].last_seq}; its peers "
                          f"entered #{parting} {collective['op']} {collective['sizes']}"
                          + (f" at {collective['site']}" if collective.get("site") else ""))
            elif rank in ok and ok[rank].entries:
                e = ok[rank].entries[-1]
                ev.append(f"{file_name(r.d, 'fr', 'pkl')}: last collective {e.describe()} "
                          f"({'returned' if e.finished else 'in flight'}); every dump ends at the same number")
            where = f" at {frame.where()}" if frame else ""
            phase_txt = {"eval": "evaluation", "checkpoint": "checkpointing", "data": "loading data",
                         "hook": "the task's own code (on_step_end)"}.get(r.phase or "", f"phase {r.phase}")
            out.append(self.culprit(
                "hang", r, ev, conf,
                f"{self.rank_line(r)} stalled in {phase_txt} outside any collective{where}; "
                f"its peers waited" + (f" in collective #{parting} {collective['op']}" if collective else ""),
                frame, collective))
        return out, self._roles([ranks[r] for r in cands])

    def _comm(self) -> list[Culprit]:
        ev = []
        for r in list(self.ranks.values())[:8]:
            ev += self.record_evidence(r)
        teardown = find_line(self.lines, NCCL_TEARDOWN_PATTERNS)
        if teardown:
            ev.insert(0, f"log: {teardown}")
        return [self.culprit("comm", None, ev, "low",
                             "collectives failed or timed out on every rank and no rank stood outside one: "
                             "the network or a device, not a rank's code")]


def analyse(gen: Generation, *, restarts: int = 1, root: str = "",
            logs: Mapping[int | None, list[str]] | None = None,
            finished_nodes: Iterable[int | None] = (), fr_limit: int = FR_ALL_LIMIT) -> Diagnosis:
    """Diagnose one restart.

    Args:
        gen: the restart's attempts (:func:`k8sddp.diagnose.load.load`).
        restarts: how many restarts the volume holds (for the report).
        root: the folder read (for the report).
        logs: ``{node: output lines}`` to use instead of the run records' ``failure_log_tail``
            (the launcher passes its own, before its run record is written).
        finished_nodes: nodes whose command is known to have ended (the launcher's own).
        fr_limit: read every flight-recorder dump up to this many ranks.
    """
    merged: dict[int | None, list[str]] = {a.node: a.log_tail for a in gen.attempts}
    merged.update(logs or {})
    an = _Analysis(gen, merged, set(finished_nodes), fr_limit)
    culprits, roles = an.run()
    notes = an.notes
    if an.world and len(an.ranks) < an.world:
        missing = sorted(set(range(an.world)) - set(an.ranks))
        shown = ", ".join(str(r) for r in missing[:20]) + (" ..." if len(missing) > 20 else "")
        notes.append(f"records of {len(missing)} of {an.world} ranks are missing ({shown}): another node's "
                     "folder is not on this volume, or those ranks never started; confidence lowered")
        for c in culprits:
            c.confidence = lower(c.confidence)
    bad = [f"{a.path.name}/{u}" for a in gen.attempts for u in a.unreadable]
    if bad:
        notes.append(f"{len(bad)} unreadable file(s), ignored ({'; '.join(bad[:10])}"
                     f"{' ...' if len(bad) > 10 else ''}): truncated or not the runtime's format; confidence lowered")
        for c in culprits:
            c.confidence = lower(c.confidence)
    states = []
    for rank, r in sorted(an.ranks.items()):
        role = roles.get(rank, "unknown")
        rec = r.d.failure or {}
        detail = str(rec.get("message") or "")[:160]
        if not detail and r.exit is not None and r.exit != 0:
            detail = f"exit {r.exit} ({signal_name(r.exit)})"
        if r.d.stacks is not None and r.d.stacks.frames and role != "culprit":
            f = r.d.stacks.stalled_frame()
            state = "in a collective" if r.d.stacks.waiting else "outside any collective"
            detail = (detail + "; " if detail else "") + f"main thread {state} at {f.where() if f else '?'}"
        states.append(RankState(rank, r.d.node, role, r.kind, r.step, r.phase, detail))
    if culprits:
        verdict = culprits[0].summary
    elif all(s.role == "done" for s in states) and states:
        verdict = "every rank finished: nothing failed"
    elif bad:
        verdict = "no failure could be read: unreadable records (see notes), or the ranks are still running"
    elif any(s.role == "running" for s in states):
        verdict = "the ranks are still running (no failure recorded yet)"
    else:
        verdict = "no rank left a record: nothing to diagnose"
    return Diagnosis(root, [str(a.path) for a in gen.attempts], gen.index, restarts, an.world,
                     culprits, states, notes, verdict)
