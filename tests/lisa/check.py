#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Check asym-sim's traces with ARM's LISA (lisa-linux 3.1.0, the registry's release).

Loads each run's trace.txt and platform_info.yml with LISA as a user would and compares
LISA's numbers with the run's report.json, one line per comparison:

    ok   juno-r2/jank task ui-0 pid 1001 runtime by pid [s]: lisa=1.805474 report=1.805475 tol=0.001805

A run is a directory holding those three files. With --sim, every bundled workload is
first simulated on each board (the runs go under --out); LISA's own PELT behaviour test
(its load-tracking test logic, on LISA-generated rt-app workloads pinned to a big and a
LITTLE CPU) then runs too. The determinism check loads one run --repeat times and
compares every number. Ends with `lisa: N passed, M failed` and exits non-zero if
anything failed. See tests/lisa/README.md.
"""

import argparse
import hashlib
import json
import logging
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

WORKAROUNDS = []


def setup_lisa():
    """Import LISA quietly and apply the workarounds for its own bugs (each one says
    what it fixes; none of them changes what the trace says)."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    global Trace, PlatformInfo, TaskState, TaskID, dt
    from lisa.trace import Trace, TaskID
    from lisa.platforms.platinfo import PlatformInfo
    from lisa.analysis.tasks import TaskState
    import lisa.datautils as dt

    # 0. `import lisa` turns DeprecationWarnings raised inside lisa.* into errors (a
    #    development aid of LISA's); LISA 3.1.0 itself calls pandas APIs that pandas
    #    2.2 deprecates (`DataFrameGroupBy.apply` on grouping columns, in
    #    RTAEventsAnalysis.df_rtapp_loop), so that filter makes LISA's own analyses
    #    raise. Put "ignore" back in front.
    warnings.filterwarnings("ignore")

    # 1. LISA 3.1.0 derives the `userspace@` meta-events (rt-app's markers) only from
    #    the `print` event of trace.dat / `trace-cmd report` text, while its own
    #    HRTxtTraceParser parses the kernel's text form of the same record,
    #    `tracing_mark_write: BUF`, as an event named `tracing_mark_write` with the
    #    `buf` field. Declare that event as a second source of userspace meta-events.
    def _select_tracing_mark_write(self, source_event, meta_event, df):
        return (df, "buf")

    Trace._META_EVENT_SOURCE["userspace"]["tracing_mark_write"] = _select_tracing_mark_write

    # 2. TaskState.from_sched_switch_str ORs in every state whose char is "" (since
    #    '' in 'S' is true), so `S` parses as 7425 and `R` as 7424: preempted time
    #    (TASK_RUNNING) is then taken for sleep by df_task_activation, which LISA's PELT
    #    test uses. Parse only the states that have a char.
    def from_sched_switch_str(cls, string):
        state = 0
        for s in cls:
            if s.char and s.char in string:
                state |= s
        return state

    TaskState.from_sched_switch_str = classmethod(from_sched_switch_str)

    # 3. By name, TasksAnalysis._df_tasks_states adds a TASK_RENAMED row per task_rename
    #    that carries the *old* comm, then keeps the rows whose comm is the asked name.
    #    The interval in which a running task renames itself (rt-app's threads do it
    #    first thing) then has its start row (the sched_switch, old comm) and its
    #    TASK_RENAMED row under the old name, and nothing under the new one: the new
    #    name's first stretch of running is lost (a whole first activation, up to
    #    75 ms in camera-lb). Give the new name a row at the rename that continues the
    #    state and CPU the task was in, as LISA does for every other state change.
    import lisa.analysis.tasks as tasks_mod

    filter_task_ids = tasks_mod.df_filter_task_ids

    def df_filter_task_ids(df, task_ids, *args, **kwargs):
        if "curr_state" in df.columns and "comm" in df.columns:
            df = continue_state_across_rename(df)
        return filter_task_ids(df, task_ids, *args, **kwargs)

    tasks_mod.df_filter_task_ids = df_filter_task_ids

    # 4. datautils._data_window (df_window, series_window) ends its slice at the *first*
    #    row of the window's last timestamp (`searchsorted` finds the leftmost match), so
    #    rows that share that timestamp are dropped. sched_switch always gives two rows
    #    with one timestamp (prev and next task) in TasksAnalysis' state table, so when a
    #    trace's last state change is a switch to a task, df_tasks_runtime loses that
    #    task's last stretch of running (jank on juno-r2: render-1 3 ms short). Keep every
    #    row of the last timestamp.
    data_window = dt._data_window

    def _data_window(data, window, method, clip_window):
        res = data_window(data, window, method, clip_window)
        if method == "exclusive" or not len(res) or len(res) == len(data):
            return res
        index = data.index
        if not index.is_monotonic_increasing:
            return res
        stop = index.searchsorted(res.index[-1], side="left") + 1
        full_stop = index.searchsorted(res.index[-1], side="right")
        if full_stop > stop:
            begin = stop - len(res)
            return data.iloc[begin:full_stop]
        return res

    dt._data_window = _data_window
    WORKAROUNDS[:] = [
        "warnings: `import lisa` makes its own pandas-2.2 DeprecationWarnings errors",
        "userspace@ meta-events also from `tracing_mark_write` lines (HRTxtTraceParser)",
        "TaskState.from_sched_switch_str: '' in 'S' made S=7425, R=7424",
        "by name, the stretch a task runs after renaming itself counts under its new name",
        "df_window keeps every row of the window's last timestamp (df_tasks_runtime)",
    ]


def continue_state_across_rename(df):
    """Workaround 3: after each TASK_RENAMED row (old comm), a row under the new comm (that
    of the pid's next row) with the state and CPU of the pid's row before the rename."""
    import numpy as np
    import pandas as pd

    state = df["curr_state"].to_numpy()
    renamed = state == TaskState.TASK_RENAMED
    if not renamed.any():
        return df
    by_pid = df.groupby("pid", sort=False, observed=True)
    before_state = by_pid["curr_state"].shift(1).to_numpy()
    before_cpu = by_pid["cpu"].shift(1).to_numpy()
    after_comm = by_pid["comm"].shift(-1).to_numpy()
    keep = renamed & pd.notna(before_state) & pd.notna(after_comm)
    if not keep.any():
        return df
    new = df[keep].copy()
    new["comm"] = after_comm[keep]
    new["curr_state"] = before_state[keep].astype(df["curr_state"].dtype)
    new["cpu"] = before_cpu[keep]
    # Stable: the new row comes right after its TASK_RENAMED row.
    out = pd.concat([df, new])
    order = np.argsort(out.index.to_numpy(), kind="stable")
    return out.iloc[order]


# ---------------------------------------------------------------------------------------
# Running the simulator

# Workloads whose full-length trace is too big to parse in CI time (cyclictest writes
# ~130 MB and messaging ~70 MB per simulated second; LISA's text parser reads about
# 0.3 MB/s on the 2-core CI machine): they run for this long instead. report.json covers
# the same shorter window, so the comparison is as exact as for the others.
DURATION_CAP = {"cyclictest": "100ms", "messaging": "200ms"}


def run_sim(sim, board, workload, out, extra=()):
    cmd = [sim, "--board", board, "--workload", workload, "--eas", "on", "--lb", "on",
           "--out", out, "--quiet", *extra]
    subprocess.run(cmd, check=True)


def load(out, swap_root):
    """The trace as a user opens it: Trace(trace.txt, plat_info=platform_info.yml), viewed
    over the recorded window [0, duration] (the run's length; the trace's last line may
    come earlier, or a few ns later: see below). A fresh swap directory each time, so
    nothing is reused between loads."""
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    dur = rep["duration_ns"] / 1e9
    pi = PlatformInfo.from_yaml_map(os.path.join(out, "platform_info.yml"))
    swap = tempfile.mkdtemp(dir=swap_root)
    tr = Trace(os.path.join(out, "trace.txt"), plat_info=pi, write_swap=False, swap_dir=swap)
    # Lines at the very end of the run carry the trace clock's few-ns spread past it.
    return tr.get_view((0, max(dur, tr.end))), pi, rep, dur


# ---------------------------------------------------------------------------------------
# Comparisons


class Results:
    def __init__(self, label):
        self.label = label
        self.lines = []
        self.values = []  # every LISA number, for the determinism digest
        self.passed = 0
        self.failed = 0

    def check(self, what, lisa, report, tol, unit=""):
        lisa = float(lisa)
        report = float(report)
        ok = math.isfinite(lisa) and abs(lisa - report) <= tol
        self.values.append((what, round(lisa, 9)))
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        u = f" [{unit}]" if unit else ""
        self.lines.append(
            f"{'ok  ' if ok else 'FAIL'} {self.label} {what}{u}: "
            f"lisa={lisa:.6f} report={report:.6f} tol={tol:.6f}"
        )

    def verdict(self, what, ok, detail):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        self.lines.append(f"{'ok  ' if ok else 'FAIL'} {self.label} {what}: {detail}")

    def fail(self, what, why):
        self.verdict(what, False, why)

    def note(self, what):
        self.lines.append(f"note {self.label} {what}")


# Tolerances; README.md's table says why each is what it is. The limit is 1 % for
# times and energy. The trace clock moves each line by up to the number of lines of its
# simulated instant, in ns (< 200 ns in the bundled workloads), and a switch-in follows
# more lines of its instant than a switch-out, so a task's running stretches are a few
# tens of ns short in the trace (0.8 % of cyclictest's 5 µs runs). A task time made of k
# running stretches is held to k µs (5 times the largest spread, at each end), and never
# more than 1 %; means of signals that step with task stretches to 1 %; frequency, busy
# and overutilized times (long stretches) and energy to 0.1 %.
TASK_TIME_REL = 0.01  # task runtime and residency: at most 1 % ...
STRETCH_S = 1e-6  # ... and at most 1 µs per running stretch LISA found (at least 1 µs)
TIME_FLOOR_S = 20e-6  # CPU times: 0.1 % or 20 µs, whichever is larger
CPU_TIME_REL = 0.001  # frequency residency, busy time per OPP, overutilized time: 0.1 %
ENERGY_REL = 0.001  # energy: 0.1 %
SIGNAL_MEAN_REL = 0.01  # time-weighted mean of a 0..1024 signal: 1 % ...
SIGNAL_MEAN_ABS = 0.05  # ... or 0.05 (report.json rounds means to 0.001)
PERF_ABS = 1e-6  # rt-app slack and performance index means (same integers, float sums)


def tol_task_time(v, stretches):
    return max(min(TASK_TIME_REL * abs(v), stretches * STRETCH_S), STRETCH_S)


def tol_cpu_time(v):
    return max(CPU_TIME_REL * abs(v), TIME_FLOOR_S)


def tol_mean(v):
    return max(SIGNAL_MEAN_REL * abs(v), SIGNAL_MEAN_ABS)


def step_mean(series, start, end):
    """LISA's time-weighted mean of a step signal from `start` to `end`."""
    s = dt.series_refit_index(series, window=(start, end))
    return dt.series_mean(s, method="rect")


def check_run(args):
    """Load one run with LISA and compare. Returns (label, lines, values, passed, failed)."""
    label, out, swap_root = args
    res = Results(label)
    t0 = time.time()
    try:
        tr, pi, rep, dur = load(out, swap_root)
        compare_run(tr, pi, rep, res, dur)
    except Exception as e:  # a LISA analysis that raises is a failed check, not a crash
        import traceback

        res.fail("analysis raised", f"{type(e).__name__}: {e}")
        res.lines.append(traceback.format_exc())
    res.note(f"loaded and compared in {time.time() - t0:.1f} s")
    return res.label, res.lines, res.values, res.passed, res.failed


def compare_run(tr, pi, rep, res, dur):
    ana = tr.ana
    tasks = rep["tasks"]

    # --- per task: runtime, residency, activations, by pid and by name ---------------
    rt = ana.tasks.df_tasks_runtime()
    wk = ana.tasks.df_tasks_wakeups()
    wkn = tr.df_event("sched_wakeup_new").groupby("pid").size()
    for t in tasks:
        pid, name = t["pid"], t["name"]
        tag = f"task {name} pid {pid}"
        runtime = t["runtime_ns"] / 1e9
        acts = (wk.loc[pid, "wakeups"] if pid in wk.index else 0) + wkn.get(pid, 0)
        res.check(f"{tag} activations (df_tasks_wakeups + sched_wakeup_new)", acts,
                  t["activations"], 0)
        lisa_rt = rt.loc[pid, "runtime"] if pid in rt.index else 0.0
        if t["activations"] == 0:
            res.check(f"{tag} runtime (df_tasks_runtime)", lisa_rt, runtime, STRETCH_S, "s")
            continue
        # A renamed task has two (pid, comm) pairs; TaskID(pid, None) is the pid alone.
        pid_id = TaskID(pid=pid, comm=None)
        pids = tr.get_task_name_pids(name)
        res.check(f"{tag} pids named {name}", len(pids) == 1 and pids[0] == pid, 1, 0)
        for how, task in (("pid", pid_id), ("name", name)):
            # The running stretches LISA found, per CPU: they size the tolerance.
            states = ana.tasks.df_task_states(task)
            stretches = states[states["curr_state"] == TaskState.TASK_ACTIVE].groupby("cpu").size()
            k = int(stretches.sum())
            if how == "pid":
                res.check(f"{tag} runtime (df_tasks_runtime)", lisa_rt, runtime,
                          tol_task_time(runtime, k), "s")
            resid = ana.tasks.df_task_total_residency(task)["runtime"]
            res.check(f"{tag} runtime by {how}", resid.sum(), runtime,
                      tol_task_time(runtime, k), "s")
            for cpu, ns in enumerate(t["residency_ns"]):
                v = resid.get(float(cpu), resid.get(cpu, 0.0))
                kc = int(stretches.get(float(cpu), stretches.get(cpu, 0)))
                res.check(f"{tag} residency cpu{cpu} by {how}", v, ns / 1e9,
                          tol_task_time(ns / 1e9, kc), "s")
        # By name, LISA counts the wake-ups while the task has that name: the first one
        # (sched_wakeup_new) names it `rt-app`, before it renames itself.
        waking = int((states["curr_state"] == TaskState.TASK_WAKING).sum())
        res.check(f"{tag} activations by name (+1 as rt-app)", waking + 1, t["activations"], 0)

    # --- per task signals: util, load, util_est ewma / enqueued -------------------------
    lt = ana.load_tracking
    sigs = {
        "util": ("util", "util"),
        "load": ("load", "load"),
        "ewma": ("ewma", "util_est_ewma"),
        "enqueued": ("enqueued", "util_est_enqueued"),
    }
    for signal, (col, key) in sigs.items():
        df = lt.df_tasks_signal(signal)
        for t in tasks:
            want = t["signals"][key]
            if want is None:
                continue
            s = df[df["pid"] == t["pid"]][col]
            tag = f"task {t['name']} pid {t['pid']} {signal}"
            if s.empty:
                res.fail(tag, "no samples in the trace")
                continue
            res.check(f"{tag} mean", step_mean(s, s.index[0], dur), want["mean"],
                      tol_mean(want["mean"]))
            res.check(f"{tag} last", s.iloc[-1], want["last"], 0)

    # --- per CPU: util, load, util_est enqueued, capacity -------------------------------
    orig = pi["cpu-capacities"]["orig"]
    cap = lt.df_cpus_signal("capacity")
    for c in rep["cpus"]:
        cpu = c["cpu"]
        res.check(f"cpu{cpu} capacity_orig (platform_info)", orig[cpu], c["capacity_orig"], 0)
        capo = cap[cap["cpu"] == cpu]["capacity_orig"]
        res.check(f"cpu{cpu} capacity_orig (sched_cpu_capacity)", capo.iloc[-1],
                  c["capacity_orig"], 0)
    for signal, key, col in [("util", "util", "util"), ("load", "load", "load"),
                             ("enqueued", "util_est_enqueued", "enqueued"),
                             ("capacity", "capacity_curr", "capacity_curr")]:
        df = lt.df_cpus_signal(signal)
        for c in rep["cpus"]:
            want = c["signals"][key]
            if want is None:
                continue
            s = df[df["cpu"] == c["cpu"]][col]
            tag = f"cpu{c['cpu']} {key}"
            res.check(f"{tag} mean", step_mean(s, s.index[0], dur), want["mean"],
                      tol_mean(want["mean"]))
            res.check(f"{tag} last", s.iloc[-1], want["last"], 0)

    # --- frequency residency per domain and per CPU ---------------------------------------
    fr = ana.frequency
    for d in rep["energy"]["perf_domains"]:
        first = d["cpus"][0]
        dom = fr.df_domain_frequency_residency(first)
        for o in d["frequency_residency"]:
            v = dom["total_time"].get(o["khz"], 0.0)
            want = o["time_ns"] / 1e9
            res.check(f"domain {d['name']} time at {o['khz']} kHz", v, want,
                      tol_cpu_time(want), "s")
        for cr in d["residency"]:
            df = fr.df_cpu_frequency_residency(cr["cpu"])
            for o in cr["opps"]:
                v = df["active_time"].get(o["khz"], 0.0)
                want = o["busy_ns"] / 1e9
                res.check(f"cpu{cr['cpu']} busy at {o['khz']} kHz", v, want,
                          tol_cpu_time(want), "s")

    # --- overutilized time, context switches --------------------------------------------
    want = rep["counters"]["overutilized_ns"] / 1e9
    res.check("overutilized time", ana.status.get_overutilized_time(), want,
              tol_cpu_time(want), "s")
    cs = ana.cpus.df_context_switches()["context_switch_cnt"].sum()
    res.check("context switches", cs, rep["counters"]["context_switches"], 0)

    # --- rt-app statistics ---------------------------------------------------------------
    stats = ana.rta.df_rtapp_stats()
    for t in tasks:
        want = t["rtapp"]
        s = stats[stats["__pid"] == t["pid"]]
        tag = f"task {t['name']} pid {t['pid']} rt-app"
        res.check(f"{tag} loops", len(s), want["loops"], 0)
        if len(s):
            res.check(f"{tag} slack mean", s["slack"].mean(), want["slack_us_mean"], PERF_ABS, "us")
            pidx = s["perf_index"][s["c_period"] != s["c_run"]]
            v = pidx.mean() if len(pidx) else 0.0
            res.check(f"{tag} perf index mean", v, want["perf_index_mean"], PERF_ABS)

    # --- energy -------------------------------------------------------------------------
    if rep["energy"]["model_available"]:
        power = pi["nrg-model"].estimate_from_trace(tr).sum(axis=1)
        # Several rows can share a timestamp (idle and frequency changes at one
        # instant); the last one holds.
        power = power[~power.index.duplicated(keep="last")]
        uj = dt.series_integrate(dt.series_refit_index(power, window=(0, dur)), method="rect")
        want = rep["energy"]["total_uj"]
        res.check("energy estimate", uj, want, ENERGY_REL * abs(want), "uJ")


# ---------------------------------------------------------------------------------------
# LISA's PELT behaviour check


def pelt_checks(sim, board, cpus, root):
    """LISA's load-tracking test (lisa.tests.scheduler.load_tracking.TaskInvariance item)
    on the simulator: LISA writes the rt-app workload for `cpu` at its top frequency
    (`get_rtapp_profile`: a periodic task at half the CPU's capacity, pinned), the
    simulator runs it, and LISA's own test methods judge the trace."""
    from lisa.tests.scheduler.load_tracking import TaskInvariance
    from lisa.wlgen.rta import RTAConf
    from devlib.target import KernelVersion

    class Item(TaskInvariance.ITEM_CLS):
        # The bundle loads its trace from the result directory; ours is text.
        TRACE_PATH = "trace.txt"

    res = Results(f"{board}/pelt")
    for cpu in cpus:
        out = os.path.join(root, f"{board}-pelt-cpu{cpu}")
        os.makedirs(out, exist_ok=True)
        # The board's platform info, as the simulator writes it.
        wl0 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads",
                           "ramp.json")
        run_sim(sim, board, wl0, out, ["--duration", "1ms"])
        pi = PlatformInfo.from_yaml_map(os.path.join(out, "platform_info.yml"))
        # The kernel whose PELT the simulator re-derives (the test only asks whether
        # load is CPU-invariant, true since v5.1).
        pi.add_src("asym-sim", {"kernel": {"version": KernelVersion("6.12.0")}})
        freq = max(pi["freqs"][cpu])
        profile = Item.get_rtapp_profile(pi, cpu=cpu, freq=freq)
        wl = os.path.join(out, "lisa-invariance.json")
        with open(wl, "w") as f:
            f.write(RTAConf.from_profile(profile, plat_info=pi).json)
        run_sim(sim, board, wl, out, ["--governor", "performance"])
        item = Item(out, pi, cpu, freq, [freq])
        side = "big" if pi["cpu-capacities"]["orig"][cpu] == 1024 else "LITTLE"
        for test in ("test_util_correctness", "test_load_correctness", "test_util_behaviour"):
            r = getattr(item, test)()
            metrics = ", ".join(f"{k}={v}" for k, v in r.metrics.items())
            ok = str(r.result).endswith("PASSED")
            res.verdict(f"cpu{cpu} ({side}) {test}", ok, f"{r.result} [{metrics}]")
    return res.label, res.lines, res.values, res.passed, res.failed


# ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Each RUN is a directory holding trace.txt, report.json and platform_info.yml "
               "(what asym-sim --out writes).")
    ap.add_argument("runs", nargs="*", metavar="RUN", help="existing run directories to check")
    ap.add_argument("--sim", help="the asym-sim binary: simulate the workloads and check them")
    ap.add_argument("--workloads", help="directory of rt-app workloads (with --sim)")
    ap.add_argument("--out", help="scratch directory for the runs (with --sim; emptied)")
    ap.add_argument("--boards", default="juno-r2,hikey960")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10,
                    help="load this many times for the determinism check")
    ap.add_argument("--repeat-run", default="juno-r2/jank",
                    help="the run loaded --repeat times (BOARD/WORKLOAD or a RUN)")
    ap.add_argument("--no-pelt", action="store_true", help="skip LISA's PELT check")
    args = ap.parse_args()
    if not args.runs and not args.sim:
        ap.error("give RUN directories, or --sim with --workloads and --out")
    if args.sim and not (args.workloads and args.out):
        ap.error("--sim needs --workloads and --out")

    started = time.time()
    setup_lisa()
    scratch = args.out or tempfile.mkdtemp(prefix="asym-lisa-")
    if args.sim:
        if os.path.exists(scratch):
            shutil.rmtree(scratch)
        os.makedirs(scratch)
    swap_root = os.path.join(scratch, "swap")
    os.makedirs(swap_root, exist_ok=True)

    runs = [(os.path.basename(os.path.normpath(r)), r, swap_root) for r in args.runs]
    for r in args.runs:
        for f in ("trace.txt", "report.json", "platform_info.yml"):
            if not os.path.exists(os.path.join(r, f)):
                ap.error(f"{r}: no {f}")
    if args.sim:
        only = [w for w in args.only.split(",") if w]
        names = sorted(f[:-5] for f in os.listdir(args.workloads) if f.endswith(".json"))
        missing = [w for w in only if w not in names]
        if missing:
            ap.error(f"no workload {', '.join(missing)} in {args.workloads}")
        names = [n for n in names if not only or n in only]
        for board in args.boards.split(","):
            for n in names:
                out = os.path.join(scratch, board, n)
                extra = ["--duration", DURATION_CAP[n]] if n in DURATION_CAP else []
                run_sim(args.sim, board, os.path.join(args.workloads, n + ".json"), out, extra)
                runs.append((f"{board}/{n}", out, swap_root))
        print(f"lisa: simulated {len(runs)} runs in {time.time() - started:.1f} s "
              f"(capped: {', '.join(f'{k} {v}' for k, v in DURATION_CAP.items())})", flush=True)
    for w in WORKAROUNDS:
        print(f"lisa: workaround for a LISA bug: {w}")

    passed = failed = 0

    def report(result):
        nonlocal passed, failed
        label, lines, _values, p, f = result
        for line in lines:
            print(line)
        print(f"lisa: {label}: {p} passed, {f} failed", flush=True)
        passed += p
        failed += f

    # Determinism: the same trace loaded `repeat` times gives the same LISA numbers. The
    # loads run in the pool beside the others, each in a fresh Trace and swap directory.
    rep_runs = [r for r in runs if r[0] == args.repeat_run or r[1] == args.repeat_run]
    repeats = rep_runs[:1] * (args.repeat if args.repeat > 1 else 0)
    if args.repeat > 1 and not rep_runs:
        print(f"FAIL determinism: no run {args.repeat_run} to load {args.repeat} times")
        failed += 1

    # Biggest traces first so that the two workers finish together.
    runs.sort(key=lambda r: -os.path.getsize(os.path.join(r[1], "trace.txt")))
    with multiprocessing.get_context("fork").Pool(max(1, args.jobs)) as pool:
        pelt = []
        if args.sim and not args.no_pelt:
            pelt = [pool.apply_async(pelt_checks, (args.sim, "juno-r2", [0, 2], scratch)),
                    pool.apply_async(pelt_checks, (args.sim, "hikey960", [4, 0], scratch))]
        again = [pool.apply_async(check_run, (r,)) for r in repeats]
        for result in pool.imap_unordered(check_run, runs):
            report(result)
        for p in pelt:
            report(p.get())
        digests = set()
        for a in again:
            _label, _lines, values, _p, _f = a.get()
            digests.add(hashlib.sha256(repr(values).encode()).hexdigest()[:16])
        if repeats:
            ok = len(digests) == 1
            print(f"{'ok  ' if ok else 'FAIL'} {repeats[0][0]} {len(repeats)} loads give "
                  f"identical LISA numbers ({len(values)} values): digests {sorted(digests)}")
            passed += ok
            failed += not ok

    print(f"lisa: checked in {time.time() - started:.0f} s")
    print(f"lisa: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
