//! The kernel's scheduler trace: the events the simulator writes (`sched_switch`,
//! `sched_waking`, `sched_wakeup[_new]`, `sched_migrate_task`, `task_rename`, `cpu_frequency`,
//! `cpu_idle`, `sched_overutilized` (each change of the root domain's flag, and its value at
//! time zero), rt-app's `trace_marker` lines, other `trace_marker` text from EL0 tasks; the
//! kernel adds `softirq_raise`/`softirq_entry`/`softirq_exit` of `SCHED_SOFTIRQ`)
//! recorded as fixed-size records into one lock-free ring per CPU
//! (`asym_trace::ring::SliceRing`), then merged by time and written as Linux ftrace text by
//! the simulator's own formatter (`asym_trace::ftrace`), over semihosting.
//!
//! The shape of Linux's tracepoints into the per-CPU ring buffer (`kernel/trace/ring_buffer.c`):
//! a record point costs a timestamp, a few shifts and five relaxed stores, with interrupts
//! masked so that the CPU is the ring's only producer. A full ring refuses records and counts
//! them ([`lost`]); the trace's header says how many were lost, never silently.
//!
//! Threads are recorded by their [`ThreadId`]; the drain names them: the rt-app executor
//! registers its threads with the pid and name the simulator gives the same workload thread
//! (`1001 + index`), so both traces name a task alike; other kernel threads get `slot + 1`
//! and their thread name; idle threads are pid 0 (`swapper/N`, `<idle>`). Timestamps are guest
//! ns since [`enable`] (the workload's time zero), as the simulator's are since its start.
//!
//! Each record point is one call from the scheduler (`crate::sched`), so the scheduler's code
//! keeps one line per event.

use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, AtomicI8, AtomicU64, Ordering};

use alloc::vec::Vec;
use asym_rtapp::marker::Marker;
use asym_sched::types::CpuId;
use asym_trace::ftrace::{
    write_header, Comm, Ctx, Event, PrevState, Record, SliceWriter, TaskRef, TraceClock,
};
use asym_trace::ring::SliceRing;

use crate::arch;
use crate::dt::MAX_CPUS;
use crate::percpu::current_cpu;
use crate::sync::InitOnce;
use crate::task::{self, ThreadId, MAX_THREADS};

/// Words per record: time, header (kind, CPU, context thread), three payload words.
const W: usize = 5;
/// The context or a task field naming an idle thread.
const IDLE: u32 = u32::MAX;

/// Record kinds (the header's low byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Switch = 1,
    Waking = 2,
    Wakeup = 3,
    WakeupNew = 4,
    Migrate = 5,
    Rename = 6,
    CpuFrequency = 7,
    CpuIdle = 8,
    Marker = 9,
    /// A `trace_marker` text that is no rt-app marker: its length and first 16 bytes, then
    /// `tag` [`Kind::TextCont`] records of 24 bytes each, published together.
    Text = 10,
    TextCont = 11,
    /// `softirq_raise` / `softirq_entry` / `softirq_exit` (tag 0 / 1 / 2) of `SCHED_SOFTIRQ`.
    Softirq = 12,
    /// `sched_overutilized`: the root domain's flag and span.
    Overutilized = 13,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Switch,
            2 => Kind::Waking,
            3 => Kind::Wakeup,
            4 => Kind::WakeupNew,
            5 => Kind::Migrate,
            6 => Kind::Rename,
            7 => Kind::CpuFrequency,
            8 => Kind::CpuIdle,
            9 => Kind::Marker,
            10 => Kind::Text,
            11 => Kind::TextCont,
            12 => Kind::Softirq,
            13 => Kind::Overutilized,
            _ => return None,
        })
    }
}

static RINGS: InitOnce<&'static [SliceRing<'static, W>]> = InitOnce::new();
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Guest ns of the trace's time zero.
static T0: AtomicU64 = AtomicU64::new(0);
/// Per CPU: the thread the last recorded switch put there (the context of records made in
/// interrupt context, where the stack names no thread).
static CURR: [core::sync::atomic::AtomicU32; MAX_CPUS] =
    [const { core::sync::atomic::AtomicU32::new(IDLE) }; MAX_CPUS];
/// Per thread slot: its nice value (for the `prio` fields), kept by the scheduler.
static NICE: [AtomicI8; MAX_THREADS] = [const { AtomicI8::new(0) }; MAX_THREADS];

/// Allocates `records_per_cpu` records for each of `nr_cpus` rings from the heap (once).
pub fn init(nr_cpus: usize, records_per_cpu: usize) -> bool {
    if RINGS.get().is_some() {
        return true;
    }
    let mut rings = Vec::with_capacity(nr_cpus);
    for _ in 0..nr_cpus {
        let mut slots: Vec<[AtomicU64; W]> = Vec::new();
        if slots.try_reserve_exact(records_per_cpu).is_err() {
            return false;
        }
        slots.resize_with(records_per_cpu, || [const { AtomicU64::new(0) }; W]);
        rings.push(SliceRing::new(Vec::leak(slots)));
    }
    RINGS.set(Vec::leak(rings)).is_ok()
}

/// Per CPU at [`enable`]: the thread running there (`IDLE` or its id), and its frequency in
/// kHz (0: no cpufreq) — the trace's first lines, as the simulator writes its initial state.
static INITIAL: [(AtomicU64, AtomicU64); MAX_CPUS] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; MAX_CPUS];

/// At [`enable`]: the root domain's overutilized flag (the trace's first
/// `sched_overutilized` line, as the simulator writes its initial state) and its span.
static INITIAL_OVERUTILIZED: (AtomicBool, AtomicU64) = (AtomicBool::new(false), AtomicU64::new(0));

/// Starts recording, with time zero now.
pub fn enable() {
    for (c, init) in INITIAL.iter().enumerate().take(crate::sched::nr_cpus()) {
        let cpu = CpuId(c as u16);
        let curr = crate::sched::rq_lock(cpu).map_or(c, |g| g.curr_slot());
        let khz = crate::cpufreq::domain_of(cpu)
            .and_then(crate::cpufreq::policy)
            .map_or(0, |p| p.cur().0);
        init.0.store(u64::from(thread(curr, c)), Ordering::Relaxed);
        CURR[c].store(thread(curr, c), Ordering::Relaxed);
        init.1.store(u64::from(khz), Ordering::Relaxed);
    }
    INITIAL_OVERUTILIZED
        .0
        .store(crate::sched::root_domain().overutilized, Ordering::Relaxed);
    INITIAL_OVERUTILIZED
        .1
        .store(crate::smp::online_mask(), Ordering::Relaxed);
    T0.store(crate::time::now().0, Ordering::Relaxed);
    ENABLED.store(RINGS.get().is_some(), Ordering::Release);
}

/// Stops recording.
pub fn disable() {
    ENABLED.store(false, Ordering::Release);
}

/// Records refused because a ring was full, over every CPU.
pub fn lost() -> u64 {
    RINGS
        .get()
        .map_or(0, |r| r.iter().map(SliceRing::lost).sum())
}

/// Records waiting in the rings.
pub fn pending() -> usize {
    RINGS
        .get()
        .map_or(0, |r| r.iter().map(SliceRing::len).sum())
}

/// The trace's time zero (guest ns).
pub fn t0() -> u64 {
    T0.load(Ordering::Relaxed)
}

/// The scheduler's record of a thread's nice value.
pub fn set_nice(slot: usize, nice: i32) {
    if let Some(n) = NICE.get(slot) {
        n.store(nice.clamp(-20, 19) as i8, Ordering::Relaxed);
    }
}

// ---- record points ---------------------------------------------------------------------------

/// `sched_switch` on this CPU from slot `prev` to slot `next` (`idle` is this CPU's idle slot).
///
/// Returns the guest time the record is stamped with (`None` while the trace is off), which
/// the energy meter then uses for the same switch, so that meter and trace agree.
pub fn switch(prev: usize, state: PrevState, next: usize, idle: usize) -> Option<u64> {
    if !on() {
        return None;
    }
    let st = match state {
        PrevState::Preempted => 0,
        PrevState::Running => 1,
        PrevState::Sleeping => 2,
        PrevState::Dead => 3,
    };
    let (p, n) = (thread(prev, idle), thread(next, idle));
    let at = record(
        Kind::Switch,
        0,
        [
            u64::from(p) << 32 | u64::from(n),
            u64::from(prio_byte(prev)) | u64::from(prio_byte(next)) << 8 | st << 16,
            0,
        ],
    );

    CURR[current_cpu().index() % MAX_CPUS].store(n, Ordering::Relaxed);
    at
}

/// `sched_waking` of slot `s` (on the waker's CPU), its CPU then `cpu`.
pub fn waking(s: usize, cpu: CpuId) {
    task_cpu(Kind::Waking, s, cpu);
}

/// `sched_wakeup` (`new`: `sched_wakeup_new`) of slot `s` onto `cpu`.
pub fn wakeup(s: usize, cpu: CpuId, new: bool) {
    task_cpu(if new { Kind::WakeupNew } else { Kind::Wakeup }, s, cpu);
}

/// `sched_migrate_task` of slot `s` from `from` to `to`.
pub fn migrate(s: usize, from: CpuId, to: CpuId) {
    if !on() {
        return;
    }
    record(
        Kind::Migrate,
        0,
        [
            u64::from(thread(s, usize::MAX)),
            u64::from(from.0) | u64::from(to.0) << 16 | u64::from(prio_byte(s)) << 32,
            0,
        ],
    );
}

/// What a [`softirq`] record marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftirqPoint {
    /// `softirq_raise` (on the raising CPU).
    Raise = 0,
    /// `softirq_entry` (on the CPU running it).
    Entry = 1,
    /// `softirq_exit`.
    Exit = 2,
}

/// `softirq_raise` / `softirq_entry` / `softirq_exit` of `SCHED_SOFTIRQ` (vec 7) on this CPU.
pub fn softirq(point: SoftirqPoint) {
    if !on() {
        return;
    }
    record(Kind::Softirq, point as u8, [7, 0, 0]);
}

/// `sched_overutilized`: the root domain's flag is now `overutilized`; `span` its CPUs.
pub fn overutilized(overutilized: bool, span: u64) {
    if !on() {
        return;
    }
    record(Kind::Overutilized, 0, [u64::from(overutilized), span, 0]);
}

/// `task_rename` of the calling thread from `rt-app` to its name (rt-app's first act).
pub fn rename_self() {
    if !on() {
        return;
    }
    if let Some(s) = task::current_slot() {
        record(Kind::Rename, 0, [u64::from(thread(s, usize::MAX)), 0, 0]);
    }
}

/// `cpu_frequency`: `cpu` now runs at `khz`. Returns the record's guest time, as
/// [`switch`] does.
pub fn cpu_frequency(cpu: CpuId, khz: u32) -> Option<u64> {
    if !on() {
        return None;
    }
    record(Kind::CpuFrequency, 0, [u64::from(khz), u64::from(cpu.0), 0])
}

/// `cpu_idle` on this CPU: entering state 0 (`enter`) or leaving idle.
pub fn cpu_idle(enter: bool) {
    if !on() {
        return;
    }
    let state = if enter {
        0
    } else {
        asym_trace::ftrace::PWR_EVENT_EXIT
    };
    let cpu = current_cpu();
    record(Kind::CpuIdle, 0, [u64::from(state), u64::from(cpu.0), 0]);
}

/// An rt-app `trace_marker` line by the calling thread.
pub fn marker(m: Marker) {
    if !on() {
        return;
    }
    let pair = |a: i64, b: i64| (a as i32 as u32 as u64) << 32 | (b as i32 as u32 as u64);
    let (tag, p) = match m {
        Marker::ClockRef { data_us } => (0, [data_us, 0, 0]),
        Marker::TaskStart => (1, [0; 3]),
        Marker::TaskEnd => (2, [0; 3]),
        Marker::Loop {
            start,
            thread_loop,
            phase,
            phase_loop,
        } => (
            3 | u8::from(start) << 4,
            [thread_loop, phase as u64, phase_loop],
        ),
        Marker::Stats {
            period,
            run,
            wu_lat,
            slack,
            c_period,
            c_run,
        } => (
            4,
            [
                pair(period, run),
                pair(wu_lat, slack),
                pair(c_period, c_run),
            ],
        ),
    };
    record(Kind::Marker, tag, p);
}

/// Longest `trace_marker` text recorded, bytes (the system call refuses longer ones).
pub const TEXT_MAX: usize = 1024;

/// A `trace_marker` write that is not one of rt-app's markers, by the calling thread: its
/// bytes as written (less one trailing newline, which the line's end replaces), at most
/// [`TEXT_MAX`]. All of it or nothing goes into the ring (a full ring counts its records
/// lost, as for any record).
pub fn marker_text(text: &[u8]) {
    if !on() {
        return;
    }
    let Some(rings) = RINGS.get() else { return };
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let text = &text[..text.len().min(TEXT_MAX)];
    let conts = text.len().saturating_sub(16).div_ceil(24);
    let word = |from: usize| {
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(text.iter().skip(from)) {
            *d = *s;
        }
        u64::from_le_bytes(w)
    };
    // IRQs masked: this CPU is its ring's only producer, and the timestamp is taken in order.
    let irq = arch::irq_save_disable();
    let cpu = current_cpu();
    let ts = ts_now();
    let head = header(Kind::Text, conts as u8, cpu);
    let cont = header(Kind::TextCont, 0, cpu);
    if let Some(r) = rings.get(cpu.index()) {
        r.push_n(1 + conts, |i| match i {
            0 => [ts, head, text.len() as u64, word(0), word(8)],
            _ => {
                let o = 16 + (i - 1) * 24;
                [ts, cont, word(o), word(o + 8), word(o + 16)]
            }
        });
    }
    arch::irq_restore(irq);
}

/// Whether the trace is recording (a `trace_marker` write now would be kept).
pub fn recording() -> bool {
    on()
}

fn on() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn task_cpu(kind: Kind, s: usize, cpu: CpuId) {
    if !on() {
        return;
    }
    record(
        kind,
        0,
        [
            u64::from(thread(s, usize::MAX)),
            u64::from(cpu.0) | u64::from(prio_byte(s)) << 16,
            0,
        ],
    );
}

/// A slot's recorded identity: its [`ThreadId`], or [`IDLE`] for an idle thread.
fn thread(s: usize, idle: usize) -> u32 {
    if s == idle || s < crate::sched::nr_cpus() {
        // Idle threads live in the first slots, one per CPU (`task::spawn_idle`).
        return IDLE;
    }
    task::slot(s).id(s).task_id().0
}

fn prio_byte(s: usize) -> u8 {
    NICE.get(s).map_or(0, |n| n.load(Ordering::Relaxed)) as u8
}

/// Records one event on this CPU; returns the guest time (ns since boot) it is stamped with.
fn record(kind: Kind, tag: u8, p: [u64; 3]) -> Option<u64> {
    let rings = RINGS.get()?;
    // IRQs masked: this CPU is its ring's only producer, and the timestamp is taken in order.
    let irq = arch::irq_save_disable();
    let cpu = current_cpu();
    let now = crate::time::now().0;
    let ts = now.saturating_sub(T0.load(Ordering::Relaxed));
    let hdr = header(kind, tag, cpu);
    if let Some(r) = rings.get(cpu.index()) {
        r.push(&[ts, hdr, p[0], p[1], p[2]]);
    }
    arch::irq_restore(irq);
    Some(now)
}

/// The tick period in ns and the first tick at or after the trace's time zero, on the
/// trace's clock (ns since time zero).
fn tick_grid() -> (u64, u64) {
    let hz = crate::timer::hz();
    let t0 = T0.load(Ordering::Relaxed);
    let first = crate::time::clock::tick_deadline_at_or_after(
        crate::time::ns_to_cyc(t0),
        crate::timer::tick_base(),
        crate::timer::counter_freq_hz(),
        hz,
    );
    (
        1_000_000_000 / u64::from(hz.max(1)),
        crate::time::cyc_to_ns(first).saturating_sub(t0),
    )
}

/// Guest ns since the trace's time zero.
fn ts_now() -> u64 {
    crate::time::now()
        .0
        .saturating_sub(T0.load(Ordering::Relaxed))
}

/// A record's header word on `cpu` (IRQs masked), its context the thread running there.
fn header(kind: Kind, tag: u8, cpu: CpuId) -> u64 {
    let ctx = CURR[cpu.index() % MAX_CPUS].load(Ordering::Relaxed);
    kind as u64 | u64::from(cpu.0) << 8 | u64::from(tag) << 16 | u64::from(ctx) << 32
}

// ---- drain -----------------------------------------------------------------------------------

/// A thread the drain names: its recorded [`ThreadId`], and the pid and name the trace gives it.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    /// `ThreadId::task_id().0`.
    pub id: u32,
    /// pid in the trace.
    pub pid: u32,
    /// comm in the trace.
    pub name: &'a str,
}

/// What the drain names threads by.
struct Names<'a> {
    /// The rt-app executor's threads (pids `1001 + index`).
    rtapp: &'a [Named<'a>],
    /// Threads renamed from `rt-app` so far.
    renamed: Vec<u32>,
}

impl Names<'_> {
    fn pid(&self, raw: u32) -> u32 {
        if raw == IDLE {
            return 0;
        }
        match self.rtapp.iter().find(|n| n.id == raw) {
            Some(n) => n.pid,
            None => ThreadId::from_task_id(asym_sched::types::TaskId(raw)).slot() as u32 + 1,
        }
    }

    /// The context of a record by thread `raw` on `cpu` at `ns` (the idle task's is `<idle>`).
    fn ctx<'b>(
        &'b self,
        raw: u32,
        buf: &'b mut heapless::String<16>,
        cpu: usize,
        ns: u64,
    ) -> Ctx<'b> {
        Ctx {
            comm: if raw == IDLE {
                Comm::Idle
            } else {
                self.comm(raw, buf, cpu)
            },
            pid: self.pid(raw),
            cpu,
            ns,
        }
    }

    fn comm<'b>(&'b self, raw: u32, buf: &'b mut heapless::String<16>, cpu: usize) -> Comm<'b> {
        if raw == IDLE {
            return Comm::Swapper(cpu);
        }
        if let Some(n) = self.rtapp.iter().find(|n| n.id == raw) {
            if !self.renamed.contains(&raw) {
                return Comm::Task(asym_trace::ftrace::RTAPP_COMM);
            }
            return Comm::Task(n.name);
        }
        buf.clear();
        let _ = buf.push_str(&task::name(ThreadId::from_task_id(
            asym_sched::types::TaskId(raw),
        )));
        Comm::Task(buf.as_str())
    }

    fn task<'b>(&'b self, raw: u32, prio: u8, buf: &'b mut heapless::String<16>) -> TaskRef<'b> {
        TaskRef {
            comm: self.comm(raw, buf, 0),
            pid: self.pid(raw),
            prio: 120 + i32::from(prio as i8),
        }
    }
}

/// Stops recording and writes the trace — header, then every CPU's records merged by time
/// (ties by CPU) — through `out`, in chunks. `rtapp` names the rt-app threads. Returns
/// the lines written.
pub fn drain<E>(
    nr_cpus: usize,
    rtapp: &[Named<'_>],
    mut out: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<u64, E> {
    disable();
    let Some(rings) = RINGS.get() else {
        return Ok(0);
    };
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + 512);
    let mut header = alloc::string::String::new();
    let _ = write_header(&mut header, nr_cpus);
    let lost = lost();
    if lost > 0 {
        let _ = writeln!(header, "# asym: {lost} records lost (trace rings full)");
    }
    // Where the ticks fall on the trace's clock, so a reader can check that timer wake-ups
    // land on them under `highres=off` (xtask's seed 002 stage). Not a `# asym: ` line: the
    // validators read those as the producer's complaints.
    let (period_ns, first_ns) = tick_grid();
    let _ = writeln!(
        header,
        "# tick grid: a tick at {first_ns} ns, every {period_ns} ns (highres={})",
        if crate::timer::highres() { "on" } else { "off" }
    );
    buf.extend_from_slice(header.as_bytes());
    let mut names = Names {
        rtapp,
        renamed: Vec::new(),
    };
    let mut clock = TraceClock::default();
    let mut lines = 0u64;
    let mut line = [0u8; 512 + TEXT_MAX];
    let mut text = [0u8; TEXT_MAX];
    // Each CPU's state at time zero: idle (if it was), and its frequency.
    for (c, (curr, khz)) in INITIAL.iter().enumerate().take(rings.len()) {
        let curr = curr.load(Ordering::Relaxed) as u32;
        let khz = khz.load(Ordering::Relaxed);
        let hdr = |k: Kind| k as u64 | (c as u64) << 8 | u64::from(curr) << 32;
        let mut first = heapless::Vec::<[u64; W], 3>::new();
        if curr == IDLE {
            let _ = first.push([0, hdr(Kind::CpuIdle), 0, c as u64, 0]);
        }
        if khz != 0 {
            let _ = first.push([0, hdr(Kind::CpuFrequency), khz, c as u64, 0]);
        }
        if c == 0 && crate::sched::root_domain().tracked {
            let (flag, span) = &INITIAL_OVERUTILIZED;
            let flag = u64::from(flag.load(Ordering::Relaxed));
            let span = span.load(Ordering::Relaxed);
            let _ = first.push([0, hdr(Kind::Overutilized), flag, span, 0]);
        }
        for rec in &first {
            if let Some(n) = format_record(rec, &mut names, &mut clock, &mut line) {
                buf.extend_from_slice(&line[..n]);
                lines += 1;
            }
        }
    }
    loop {
        // The oldest head over all rings (rings are each in time order).
        let mut best: Option<(u64, usize)> = None;
        for (c, r) in rings.iter().enumerate() {
            if let Some(rec) = r.peek() {
                if best.is_none_or(|(t, _)| rec[0] < t) {
                    best = Some((rec[0], c));
                }
            }
        }
        let Some((_, c)) = best else { break };
        let Some(rec) = rings[c].pop() else { break };
        let n = if Kind::from_u8(rec[1] as u8) == Some(Kind::Text) {
            // Its continuations follow it in the same ring (published with it).
            let len = (rec[2] as usize).min(TEXT_MAX);
            let conts = (rec[1] >> 16) as u8;
            let mut at = 0;
            let mut put = |w: u64| {
                for b in w.to_le_bytes() {
                    if at < len {
                        text[at] = b;
                        at += 1;
                    }
                }
            };
            put(rec[3]);
            put(rec[4]);
            for _ in 0..conts {
                match rings[c].pop() {
                    Some(r) if Kind::from_u8(r[1] as u8) == Some(Kind::TextCont) => {
                        r[2..].iter().for_each(|&w| put(w));
                    }
                    _ => break,
                }
            }
            format_text(&rec, &text[..at], &names, &mut clock, &mut line)
        } else {
            format_record(&rec, &mut names, &mut clock, &mut line)
        };
        if let Some(n) = n {
            buf.extend_from_slice(&line[..n]);
            lines += 1;
        }
        if buf.len() >= CHUNK {
            out(&buf)?;
            buf.clear();
        }
    }
    out(&buf)?;
    Ok(lines)
}

/// Bytes of text written per host call.
const CHUNK: usize = 16 * 1024;

fn format_record(
    rec: &[u64; W],
    names: &mut Names<'_>,
    clock: &mut TraceClock,
    line: &mut [u8],
) -> Option<usize> {
    let [ts, hdr, a, b, c] = *rec;
    let kind = Kind::from_u8(hdr as u8)?;
    let cpu = ((hdr >> 8) & 0xff) as usize;
    let tag = (hdr >> 16) as u8;
    let ctx_raw = (hdr >> 32) as u32;
    if kind == Kind::Rename {
        // The line's context shows the old name; later lines the new one.
        let mut b1 = heapless::String::new();
        let pid = names.pid(a as u32);
        let newcomm = match names.rtapp.iter().find(|n| n.id == a as u32) {
            Some(n) => Comm::Task(n.name),
            None => names.comm(a as u32, &mut b1, cpu),
        };
        let ctx = Ctx {
            comm: Comm::Task(asym_trace::ftrace::RTAPP_COMM),
            pid,
            cpu,
            ns: ts,
        };
        let ev = Event::TaskRename {
            pid,
            oldcomm: Comm::Task(asym_trace::ftrace::RTAPP_COMM),
            newcomm,
        };
        let n = write_line(ctx, ev, clock, line);
        names.renamed.push(a as u32);
        return n;
    }
    let names = &*names;
    let mut cbuf = heapless::String::new();
    let ctx = names.ctx(ctx_raw, &mut cbuf, cpu, ts);
    let (mut b1, mut b2) = (heapless::String::new(), heapless::String::new());
    let ev = match kind {
        Kind::Switch => {
            let (p, n) = ((a >> 32) as u32, a as u32);
            let prev_state = match (b >> 16) & 0xff {
                0 => PrevState::Preempted,
                1 => PrevState::Running,
                2 => PrevState::Sleeping,
                _ => PrevState::Dead,
            };
            let prev = switch_task(names, p, b as u8, cpu, &mut b1);
            let next = switch_task(names, n, (b >> 8) as u8, cpu, &mut b2);
            Event::SchedSwitch {
                prev,
                prev_state,
                next,
            }
        }
        Kind::Waking | Kind::Wakeup | Kind::WakeupNew => {
            let task = names.task(a as u32, (b >> 16) as u8, &mut b1);
            let target_cpu = (b & 0xffff) as usize;
            match kind {
                Kind::Waking => Event::SchedWaking { task, target_cpu },
                Kind::Wakeup => Event::SchedWakeup { task, target_cpu },
                _ => Event::SchedWakeupNew { task, target_cpu },
            }
        }
        Kind::Migrate => Event::SchedMigrateTask {
            task: names.task(a as u32, (b >> 32) as u8, &mut b1),
            orig_cpu: (b & 0xffff) as usize,
            dest_cpu: ((b >> 16) & 0xffff) as usize,
        },
        Kind::CpuFrequency => Event::CpuFrequency {
            khz: a as u32,
            cpu: b as usize,
        },
        Kind::CpuIdle => Event::CpuIdle {
            state: a as u32,
            cpu: b as usize,
        },
        Kind::Marker => {
            let hi = |v: u64| i64::from((v >> 32) as u32 as i32);
            let lo = |v: u64| i64::from(v as u32 as i32);
            Event::TracingMarkWrite(match tag & 0xf {
                0 => Marker::ClockRef { data_us: a },
                1 => Marker::TaskStart,
                2 => Marker::TaskEnd,
                3 => Marker::Loop {
                    start: tag & 0x10 != 0,
                    thread_loop: a,
                    phase: b as usize,
                    phase_loop: c,
                },
                _ => Marker::Stats {
                    period: hi(a),
                    run: lo(a),
                    wu_lat: hi(b),
                    slack: lo(b),
                    c_period: hi(c),
                    c_run: lo(c),
                },
            })
        }
        Kind::Softirq => {
            let irq = asym_trace::ftrace::Softirq::Sched;
            match tag {
                0 => Event::SoftirqRaise(irq),
                1 => Event::SoftirqEntry(irq),
                _ => Event::SoftirqExit(irq),
            }
        }
        Kind::Overutilized => Event::SchedOverutilized {
            overutilized: a != 0,
            span: asym_trace::ftrace::CpuMaskHex {
                mask: b,
                nr_bits: crate::sched::nr_cpus().max(1),
            },
        },
        Kind::Rename | Kind::Text | Kind::TextCont => return None,
    };
    write_line(ctx, ev, clock, line)
}

/// A [`Kind::Text`] record with its `text` gathered: `tracing_mark_write: <text>`.
fn format_text(
    rec: &[u64; W],
    text: &[u8],
    names: &Names<'_>,
    clock: &mut TraceClock,
    line: &mut [u8],
) -> Option<usize> {
    let [ts, hdr, ..] = *rec;
    let cpu = ((hdr >> 8) & 0xff) as usize;
    let ctx_raw = (hdr >> 32) as u32;
    let mut cbuf = heapless::String::new();
    let ctx = names.ctx(ctx_raw, &mut cbuf, cpu, ts);
    let t = core::str::from_utf8(text).unwrap_or("<not UTF-8>");
    write_line(ctx, Event::TracingMarkText(t), clock, line)
}

/// A `sched_switch` side: CPU `cpu`'s idle task, or a thread.
fn switch_task<'b>(
    names: &'b Names<'_>,
    raw: u32,
    prio: u8,
    cpu: usize,
    buf: &'b mut heapless::String<16>,
) -> TaskRef<'b> {
    if raw == IDLE {
        TaskRef::idle(cpu)
    } else {
        names.task(raw, prio, buf)
    }
}

fn write_line(
    ctx: Ctx<'_>,
    event: Event<'_>,
    clock: &mut TraceClock,
    line: &mut [u8],
) -> Option<usize> {
    let ts_ns = clock.stamp(ctx.ns);
    let mut w = SliceWriter::new(line);
    writeln!(w, "{}", Record { ctx, ts_ns, event }).ok()?;
    Some(w.as_bytes().len())
}

/// CPUs the rings were made for.
pub fn nr_rings() -> usize {
    RINGS.get().map_or(0, |r| r.len().min(MAX_CPUS))
}
