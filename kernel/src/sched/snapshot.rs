//! What other CPUs read and write about a run queue without its lock: the published
//! [`RqSnapshot`] and the removed load (Linux's `READ_ONCE`s of remote `struct rq` fields and
//! `cfs_rq->removed` under `removed.lock`).
//!
//! - **Snapshots**: the owner builds one with [`Rq::snapshot`] at the end of every section
//!   that holds its run-queue lock and changed the queue ([`publish`]); the wake-up path,
//!   schedutil, the NOHZ decision (and later load balancing) read every CPU's with
//!   [`read_all`] / [`read`], never another CPU's [`Rq`].
//! - **Removed load**: a remote waker that moves a sleeping task away from its old CPU, and an
//!   exiting task, add the signals the pure `migrate_task_rq_fair` / `task_dead_fair` returned
//!   to that CPU's [`RemovedLoad`] ([`add_removed`]); the owner takes them in right after each
//!   clock update ([`take_removed`] → [`Rq::apply_removed`]).
//!
//! Both are behind a leaf [`IrqSpinLock`] per CPU, not a seqlock. A seqlock reader copies the
//! record while the writer may be storing it; in Rust that copy is a data race unless every
//! word is an atomic, and [`RqSnapshot`] (with its padding and `bool`s) cannot be copied word by
//! word without reading uninitialised bytes, so no true `// SAFETY:` comment could be written
//! for it. The leaf lock is held only for a copy of ~200 bytes, is never held while taking
//! another lock, and a reader never waits for a run-queue lock; `cargo xtask bench switch`
//! measures what it costs the wake-up path.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use asym_sched::pelt::RemovedLoad;
use asym_sched::rq::{Rq, RqSnapshot};
use asym_sched::types::{CpuId, CpuMask};

use crate::dt::MAX_CPUS;
use crate::percpu::PerCpu;
use crate::sync::IrqSpinLock;

/// Each CPU's latest snapshot (`None` before its first).
static SNAPSHOTS: PerCpu<IrqSpinLock<Option<RqSnapshot>>> =
    PerCpu::new([const { IrqSpinLock::new(None) }; MAX_CPUS]);

/// Per CPU: removals wait in [`REMOVED`] (set under its lock, cleared by the owner's take):
/// the owner's check on every clock update reads this instead of taking the lock, as Linux
/// reads `cfs_rq->removed.nr` before taking `removed.lock`. A stale `false` only delays the
/// removal to the owner's next update.
static REMOVED_PENDING: PerCpu<AtomicBool> =
    PerCpu::new([const { AtomicBool::new(false) }; MAX_CPUS]);

/// Each CPU's removed load not yet taken in by its owner.
static REMOVED: PerCpu<IrqSpinLock<RemovedLoad>> = PerCpu::new(
    [const {
        IrqSpinLock::new(RemovedLoad {
            nr: 0,
            load_avg: 0,
            util_avg: 0,
            runnable_avg: 0,
        })
    }; MAX_CPUS],
);

/// Bit n: CPU n's latest snapshot is [`RqSnapshot::overloaded`]. Each CPU changes its own bit
/// under its snapshot lock with the snapshot, so newidle's gate reads one word instead of
/// copying every CPU's snapshot ([`any_overloaded`]); as stale as the snapshots are. One word
/// rather than a flag per CPU: the gate, on every switch to idle, reads it with one load.
static OVERLOADED_CPUS: AtomicU64 = AtomicU64::new(0);

const _: () = assert!(MAX_CPUS <= 64, "OVERLOADED_CPUS holds a bit per CPU");

/// Publishes `rq`'s state (call with its run-queue lock held, at the end of a section that
/// changed it).
pub fn publish(rq: &Rq) {
    let cpu = rq.cpu();
    let over = rq.overloaded();
    let mut g = SNAPSHOTS.of(cpu).lock();
    // Built straight into the slot under the leaf lock rather than built outside and copied
    // in: one ~200-byte copy less per publish (two or three per switch), for a hold of the
    // leaf lock no longer than the copy it replaces.
    *g = Some(rq.snapshot());
    // Only this CPU writes its bit (under the lock held here), so a load decides whether a
    // read-modify-write of the shared word is needed at all: mostly it is not.
    let bit = 1u64 << cpu.index();
    if (OVERLOADED_CPUS.load(Ordering::Relaxed) & bit != 0) != over {
        if over {
            OVERLOADED_CPUS.fetch_or(bit, Ordering::Relaxed);
        } else {
            OVERLOADED_CPUS.fetch_and(!bit, Ordering::Relaxed);
        }
    }
}

/// `f` of `cpu`'s latest snapshot, under its leaf lock (`None` before it published one):
/// for a reader of a few fields, which then copies those instead of all ~200 bytes twice
/// (an idle CPU asks [`super::cpu_quiet`] on every pass of its idle loop). `f` must be
/// short and take no lock: the leaf lock is held (IRQs masked) while it runs. The snapshot's
/// `online` is the one published (always true), not the CPU's state now.
pub fn read_with<R>(cpu: CpuId, f: impl FnOnce(&RqSnapshot) -> R) -> Option<R> {
    let g = SNAPSHOTS.get(cpu)?.lock();
    g.as_ref().map(f)
}

/// `cpu`'s latest snapshot, `online` as the CPU is now (`None` before it published one).
pub fn read(cpu: CpuId) -> Option<RqSnapshot> {
    let mut s = (*SNAPSHOTS.get(cpu)?.lock())?;
    s.online = crate::smp::is_online(cpu);
    Some(s)
}

/// [`read`], or for a CPU that has not published one yet its idle, empty snapshot; `online`
/// as the CPU is now either way.
pub fn read_or_idle(cpu: CpuId) -> RqSnapshot {
    read(cpu).unwrap_or_else(|| {
        let mut s = RqSnapshot::idle(cpu, super::capacity_orig(cpu));
        s.online = crate::smp::is_online(cpu);
        s
    })
}

/// Whether one of CPUs `0..nr`'s latest snapshots, `except` left out, is
/// [`RqSnapshot::overloaded`] (what reading each with [`read`] would say, without the
/// copies). `except`: newidle's gate under that CPU's rq lock reads it from its run queue.
pub fn any_overloaded(nr: usize, except: Option<CpuId>) -> bool {
    let cpus = match nr.min(MAX_CPUS) {
        64 => u64::MAX,
        n => (1u64 << n) - 1,
    };
    let except = except.map_or(0, |c| 1u64.checked_shl(c.index() as u32).unwrap_or(0));
    OVERLOADED_CPUS.load(Ordering::Relaxed) & cpus & !except != 0
}

/// `Some(snapshot's value)` when `cpu`'s published snapshot and its [`OVERLOADED_CPUS`] bit
/// disagree (a self-test check: call with `cpu`'s run-queue lock held, so nothing
/// republishes meanwhile).
pub fn overloaded_flag_mismatch(cpu: CpuId) -> Option<bool> {
    let g = SNAPSHOTS.get(cpu)?.lock();
    let snap = g.is_some_and(|s| s.overloaded());
    let word = OVERLOADED_CPUS.load(Ordering::Relaxed) & (1u64 << cpu.index()) != 0;
    drop(g);
    (snap != word).then_some(snap)
}

/// Every CPU's snapshot, indexed by [`CpuId`] (the wake-up path's `cpus`).
pub type Snapshots = heapless::Vec<RqSnapshot, MAX_CPUS>;

/// Every CPU's snapshot into `out` (cleared first; a CPU that has not published yet reads as
/// idle and empty), `online` as now. Each is copied once, under its leaf lock: on the wake-up
/// path this is most of what placement costs (`cargo xtask bench switch`).
pub fn read_all(out: &mut Snapshots, nr: usize) {
    out.clear();
    let online = CpuMask(crate::smp::online_mask());
    for (i, lock) in SNAPSHOTS.iter().take(nr.min(MAX_CPUS)) {
        let g = lock.lock();
        let s = match &*g {
            Some(s) => *s,
            None => RqSnapshot::idle(i, super::capacity_orig(i)),
        };
        drop(g);
        // `nr` <= MAX_CPUS: there is room.
        let _ = out.push(s);
        if let Some(last) = out.last_mut() {
            last.online = online.contains(i);
        }
    }
}

/// Queues `r` for removal from `cpu`'s cfs_rq (any CPU, any lock but `cpu`'s removed-load
/// lock held).
pub fn add_removed(cpu: CpuId, r: RemovedLoad) {
    if r.nr == 0 {
        return;
    }
    if let (Some(l), Some(p)) = (REMOVED.get(cpu), REMOVED_PENDING.get(cpu)) {
        let mut g = l.lock();
        g.add(r);
        p.store(true, Ordering::Release);
    }
}

/// What waits for removal from `cpu`'s cfs_rq, handed out (the owner, under its run-queue
/// lock, right after the clock update).
pub fn take_removed(cpu: CpuId) -> RemovedLoad {
    let (Some(l), Some(p)) = (REMOVED.get(cpu), REMOVED_PENDING.get(cpu)) else {
        return RemovedLoad::default();
    };
    let mut g = l.lock();
    p.store(false, Ordering::Relaxed);
    g.take()
}

/// Whether removals wait for `cpu`'s owner (lock-free: see [`REMOVED_PENDING`]).
pub fn removed_pending(cpu: CpuId) -> bool {
    REMOVED_PENDING
        .get(cpu)
        .is_some_and(|p| p.load(Ordering::Acquire))
}
