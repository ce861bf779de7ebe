//! Boot flow: from the entry asm to the banner, the self tests or the tick loop; the secondary
//! CPUs' Rust entry; the panic handler.
//!
//! Re-derives the shape of Linux's `init/main.c` `start_kernel()` (`setup_arch` →
//! `parse_early_param` → `mm_init` → `init_IRQ` → `time_init` → `smp_init`) and
//! `arch/arm64/kernel/smp.c` `secondary_start_kernel()`. Deliberate differences: the device
//! tree is parsed on a minimal early identity map (kernel image, DTB, early UART) so the final
//! map covers exactly the DT's RAM; the boot code does not become a task: once every CPU is up,
//! the boot CPU starts an `init` thread (pinned to it: the self tests, the benchmarks, the soak
//! run or the tick report) and switches to its idle thread, as every secondary does at the end
//! of its bring-up. Boot stacks are not used again after that.

use asym_sched::types::CpuId;

use crate::board::{BoardConfig, DvfsTransport, EndPolicy, Region};
use crate::cmdline::{Cmdline, SelfTestMode};
use crate::dt::Platform;
use crate::sync::InitOnce;
use crate::{arch, console, heap};

pub use crate::arch::aarch64::entry::secondary_entry_pa;

/// What a board binary tells the kernel before the device tree is read.
#[derive(Debug)]
pub struct Board {
    /// The board's name for the banner.
    pub name: &'static str,
    /// A UART usable before the DT is parsed (for DT errors), if the board has a fixed one.
    pub early_uart: Option<usize>,
    /// How a run that is meant to end ends when no semihosting host takes its status.
    pub end: EndPolicy,
    /// Firmware memory the DT does not describe: the heap never covers it.
    pub carve_outs: &'static [Region],
    /// The DVFS transports the board's firmware may speak (its crate's list). Non-empty on a
    /// real board, where frequencies are the firmware's: cpufreq then runs the driver the DT
    /// selects, or stays off, never the emulated driver. Empty for QEMU `virt`, where a DT
    /// without DVFS firmware gets the emulated driver.
    pub dvfs: &'static [DvfsTransport],
}

impl Board {
    /// A real board's binary: everything from its board crate's [`BoardConfig`] (the console
    /// u-boot left set up is usable before the DT is read).
    pub const fn from_config(c: &'static BoardConfig) -> Board {
        Board {
            name: c.name,
            early_uart: Some(c.console.uart_base),
            end: c.end,
            carve_outs: c.carve_outs,
            dvfs: c.dvfs,
        }
    }
}

unsafe extern "Rust" {
    /// Defined by the board binary (`boards/*/src/main.rs`) with `#[unsafe(no_mangle)]`.
    static ASYM_BOARD: Board;
}

static PLATFORM: InitOnce<Platform> = InitOnce::new();
static CMDLINE: InitOnce<Cmdline> = InitOnce::new();

/// The platform parsed from the DT (after boot).
pub fn platform() -> Option<&'static Platform> {
    PLATFORM.get()
}

/// Whether `cpu` is the CPU the kernel booted on.
pub fn is_boot_cpu(cpu: CpuId) -> bool {
    BOOT_CPU.load(core::sync::atomic::Ordering::Relaxed) == u32::from(cpu.0)
}

static BOOT_CPU: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// The parsed command line (after boot).
pub fn cmdline() -> Option<&'static Cmdline> {
    CMDLINE.get()
}

/// The board binary's description.
pub fn board() -> &'static Board {
    // SAFETY: the board binary defines ASYM_BOARD as an immutable static.
    unsafe { &ASYM_BOARD }
}

/// The exception level the loader entered the kernel at (1 or 2).
static ENTRY_EL: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(1);

/// The exception level the loader entered the kernel at (the kernel itself runs at EL1).
pub fn entry_el() -> u8 {
    ENTRY_EL.load(core::sync::atomic::Ordering::Relaxed)
}

/// Boot CPU Rust entry, called by `_start` at EL1 with BSS zeroed, the MMU off, on the boot
/// stack, with the DTB's physical address from x0 and the exception level the loader entered
/// at (`CurrentEL.EL`, 1 or 2).
pub extern "C" fn kernel_main(dtb_pa: usize, entry_el: u64) -> ! {
    // A plain store (no exclusives with the MMU off).
    ENTRY_EL.store(entry_el as u8, core::sync::atomic::Ordering::Relaxed);
    let t_entry = arch::counter();
    let board = board();
    if let Some(base) = board.early_uart {
        // SAFETY: the board vouches for a PL011 at this address; MMU is off.
        unsafe { console::init_early(base) };
    }
    // From here a pending SError (e.g. one the loader left) can be reported.
    arch::serror_enable();
    // SAFETY: boot CPU only, MMU off, no other CPU running; maps the image, the DTB and the
    // early UART identically (the DT parser must not run with the MMU off: unaligned loads
    // fault on Device memory).
    if let Err(e) = unsafe { arch::aarch64::mmu::init_early(dtb_pa, board.early_uart) } {
        cannot_boot(format_args!(
            "{e} (early map: kernel image, DTB {dtb_pa:#x})"
        ));
    }
    // SAFETY: x0 holds the DTB address per the arm64 boot protocol; `init_early` mapped it
    // (up to its totalsize, at most 2 MiB) at its own address when `check_dtb_pa` accepts it,
    // and `from_dtb_pa` runs that same check before reading.
    let mut plat = match unsafe { Platform::from_dtb_pa(dtb_pa) } {
        Ok(p) => p,
        Err(e) => cannot_boot(format_args!("{e} (DTB at {dtb_pa:#x})")),
    };
    let hvc_refused = entry_el == 2 && plat.psci.conduit == crate::dt::Conduit::Hvc;
    if hvc_refused {
        // Entered at EL2, the kernel is the only thing there (it drops to EL1 and leaves
        // stub vectors): an HVC reaches nobody, and firmware is only reachable by SMC.
        plat.psci.conduit = crate::dt::Conduit::Smc;
    }
    let t_dt = arch::counter();
    let image = kernel_image();
    if let Err(e) = plat.bank_holding(image) {
        cannot_boot(e);
    }
    let no_map = no_map_carve_outs();
    // SAFETY: boot CPU only, on the early map, no other CPU running; the final map covers RAM
    // and the devices, and the kernel image as the early map does; on error nothing changed.
    if let Err(e) = unsafe { arch::aarch64::mmu::init_boot_cpu(&plat, board.early_uart, &no_map) } {
        cannot_boot(format_args!(
            "{e} (final map of {} RAM banks and the devices)",
            plat.memory.len()
        ));
    }
    let t_mmu = arch::counter();
    // Only now: `InitOnce::set` is a compare-and-swap, and exclusives need the MMU on (Normal
    // memory) to be reliable on hardware.
    let Ok(plat) = PLATFORM.set(plat) else {
        arch::park()
    };
    // SAFETY: `init_boot_cpu` succeeded, so the DT's UART (range-checked by the parser) and
    // the board's early one are mapped as device memory.
    let dt_uart_ok = unsafe { console::probe(plat.uart.base) };
    let console_base = match board.early_uart {
        Some(early) if !dt_uart_ok => early,
        _ => plat.uart.base,
    };
    // SAFETY: a PL011 (probed, or the board's own), mapped as device memory (above).
    unsafe { console::init(console_base) };
    if !dt_uart_ok {
        crate::println!(
            "device tree: {} property `reg`: no PL011 answers at {:#x}: the console {} (going on)",
            plat.uart.node,
            plat.uart.base,
            if console_base == plat.uart.base {
                "stays there (the board has no other)"
            } else {
                "stays on the board's early UART"
            }
        );
    }

    let boot_cpu = plat.cpu_by_mpidr(arch::mpidr()).unwrap_or_else(|| {
        crate::println!(
            "asym: boot CPU MPIDR {:#x} is not in the DT's /cpus; assuming cpu 0",
            arch::mpidr()
        );
        CpuId(0)
    });
    arch::set_cpu_index(boot_cpu.index());
    BOOT_CPU.store(u32::from(boot_cpu.0), core::sync::atomic::Ordering::Relaxed);

    crate::println!(
        "asym: booting on {} (cpu {}, entered at EL{}, running at EL{})",
        board.name,
        boot_cpu.0,
        entry_el,
        arch::current_el()
    );
    if let Some(len) = plat.bootargs_truncated_from {
        crate::println!(
            "cmdline: /chosen/bootargs is {} bytes, longer than {}: kept the first {} bytes (whole options)",
            len,
            crate::dt::BOOTARGS_MAX,
            plat.bootargs.len()
        );
    }
    let parsed = Cmdline::parse(&plat.bootargs);
    for e in &parsed.errors {
        crate::println!("{}", e);
    }
    if parsed.errors_dropped > 0 {
        crate::println!("cmdline: {} more problems not shown", parsed.errors_dropped);
    }
    let Ok(cmd) = CMDLINE.set(parsed.cmdline) else {
        arch::park()
    };
    crate::panic::set_policy(cmd.use_semihosting(), cmd.panic_timeout_s);
    crate::log::set_level(cmd.loglevel);
    if cmd.lockdep || cmd.selftest != SelfTestMode::Off {
        crate::sync::lockdep_enable();
    }
    if hvc_refused {
        crate::println!(
            "device tree: /psci property `method`: \"hvc\" reaches nothing from a kernel \
             entered at EL2 (it is its own hypervisor): PSCI calls use \"smc\" (going on)"
        );
    }
    for n in &plat.notes.list {
        crate::println!("{} (going on)", n);
    }
    if plat.notes.dropped > 0 {
        crate::println!("device tree: {} more notes not shown", plat.notes.dropped);
    }
    if plat.cpus_ignored > 0 {
        crate::println!(
            "dt: {} CPUs beyond MAX_CPUS ({}) ignored",
            plat.cpus_ignored,
            crate::dt::MAX_CPUS
        );
    }

    init_heap(plat);
    crate::timer::init_clock(plat);
    crate::task::init();
    crate::sched::init(plat, cmd);
    let f = arch::counter_freq_hz().max(1);
    let us = |t: u64| t * 1_000_000 / f;
    crate::log_debug!(
        "boot: rust entry {=u64} us, DT parsed {=u64} us, MMU on {=u64} us, heap {=u64} us",
        us(t_entry),
        us(t_dt),
        us(t_mmu),
        us(arch::counter())
    );

    if let Err(e) = crate::gic::init(plat) {
        crate::println!("asym: GIC init failed: {}", e);
        crate::panic::end_fatal(1);
    }
    if let Err(e) = crate::timer::init(plat, cmd.hz) {
        crate::println!("asym: timer init failed: {}", e);
        crate::panic::end_fatal(1);
    }
    // The requests cpufreq made at its set-up complete through its timer, which runs now.
    crate::cpufreq::start_timer();
    crate::timer::set_highres(cmd.highres);
    if !cmd.highres {
        crate::println!(
            "timer: highres=off: timers expire on the tick (low-resolution mode, HZ={})",
            cmd.hz
        );
    }
    if console_base == plat.uart.base {
        init_console_rx(plat);
    }
    if let Some(n) = cmd.maxcpus {
        crate::smp::set_maxcpus(usize::from(n));
    }
    let online = crate::smp::start_secondaries(plat);
    // `sched_init_smp`: the domains (and whether EAS is possible) cover the CPUs that are up.
    // They were built over every CPU of the DT before the bring-up; without this a CPU left
    // down (`maxcpus=`, a failed `CPU_ON`) would look idle to the balancers and tasks pulled
    // onto it would never run.
    if online < crate::sched::nr_cpus() {
        crate::sched::online_cpus_changed();
    }
    if let Some(mpidr) = crate::drivers::fw_standin::missing_gic() {
        crate::println!(
            "dvfs: firmware stand-in: vCPU MPIDR {:#x} has no GIC interface in the regions the \
             device tree's GIC node gives; it stopped, so every firmware request will time out",
            mpidr
        );
    }
    let params = crate::task::ThreadParams {
        affinity: asym_sched::types::CpuMask::of(boot_cpu),
        detached: true,
        ..crate::task::ThreadParams::default()
    };
    if let Err(e) = crate::task::spawn("init", params, init_main, 0) {
        crate::println!("asym: cannot start the init thread: {}", e);
        crate::panic::end_fatal(1);
    }
    crate::sched::start_cpu(boot_cpu)
}

/// The `init` thread (on the boot CPU, all CPUs up): the banner, then what the command line
/// asks for — the self tests, a benchmark, the soak run, or the tick report.
fn init_main(_: usize) {
    let init_at = crate::timer::counter();
    let (Some(plat), Some(cmd)) = (platform(), cmdline()) else {
        return;
    };
    banner(plat, cmd);
    if cmd.bench {
        crate::smp::print_boot_bench(init_at);
    }
    if let Some(kind) = cmd.crash {
        crash(kind);
    }
    if cmd.bench_switch {
        let ok = crate::bench::run_switch();
        crate::panic::end_run(if ok { 0 } else { 1 });
    }
    if cmd.bench_switch_profile {
        let ok = crate::bench::run_switch_profile();
        crate::panic::end_run(if ok { 0 } else { 1 });
    }
    if cmd.bench_sched_costs {
        let ok = crate::bench::run_sched_costs();
        crate::panic::end_run(if ok { 0 } else { 1 });
    }
    if let Some(secs) = cmd.soak_s {
        let ok = crate::soak::run(secs);
        crate::panic::end_run(if ok { 0 } else { 1 });
    }
    if cmd.rtapp.is_some() {
        crate::rtapp::run(cmd);
    }
    match &cmd.selftest {
        SelfTestMode::Off => {}
        mode => {
            let filter = match mode {
                SelfTestMode::Filter(f) => Some(f.as_str()),
                _ => None,
            };
            let summary = crate::selftest::run(filter);
            crate::panic::end_run(if summary.failed == 0 { 0 } else { 1 });
        }
    }
    tick_loop(plat, cmd)
}

/// Secondary CPU Rust entry, called by `_secondary_entry` at EL1 with the MMU on, TPIDR_EL1 =
/// `cpu`, on that CPU's boot stack.
pub extern "C" fn secondary_main(cpu: usize) -> ! {
    crate::smp::secondary_init(CpuId(cpu as u16))
}

/// The IRQ vector's Rust side.
pub fn irq_entry() {
    crate::gic::handle_irq();
}

/// Stops the boot with `why` on the console (the early one if the DT's is not up yet): the
/// run ends like any fatal error (a semihosting exit with status 1 where a host answers,
/// else the system halts).
fn cannot_boot(why: impl core::fmt::Display) -> ! {
    crate::println!("asym: cannot boot: {}", why);
    crate::panic::end_fatal(1)
}

/// How long the boot CPU waits for its first tick, guest microseconds (it is due one period,
/// at most 10 ms, after `timer::init`).
const FIRST_TICK_TIMEOUT_US: u64 = 500_000;

/// Stops the run unless the boot CPU's tick arrives: without it (a DT whose timer interrupt
/// or interrupt-controller registers are wrong) the tick loop would wait forever. (Called by
/// the tick loop only: before the self tests it would shift their start by a tick, and
/// `sched_pelt_ramp_big_cpu` fails when its big CPU has ticked before its task starts.) Polls (`wfi` would never return with no interrupt coming), yielding so the other
/// CPUs run meanwhile.
fn wait_first_tick(plat: &Platform) {
    let me = crate::percpu::current_cpu();
    let deadline =
        arch::counter().saturating_add(crate::timer::us_to_counter(FIRST_TICK_TIMEOUT_US));
    while crate::timer::ticks(me) == 0 && arch::counter() < deadline {
        core::hint::spin_loop();
    }
    if crate::timer::ticks(me) == 0 {
        cannot_boot(format_args!(
            "no tick interrupt on cpu {} within {} us: check the device tree's arm,armv8-timer \
             `interrupts` (virtual timer INTID {}) and {} `reg` ({})",
            me.0, FIRST_TICK_TIMEOUT_US, plat.timer.el1_virt_intid, plat.gic_node, plat.gic
        ));
    }
}

/// The board's carve-outs that must not even be mapped (secure DRAM, firmware the CPU must not
/// fetch from speculatively).
pub fn no_map_carve_outs() -> heapless::Vec<crate::dt::MemRange, 16> {
    board()
        .carve_outs
        .iter()
        .filter(|r| r.no_map)
        .map(|r| r.range)
        .take(16)
        .collect()
}

/// The kernel image, BSS and stacks in memory.
fn kernel_image() -> crate::dt::MemRange {
    let start = (&raw const crate::arch::aarch64::mmu::__kernel_start) as usize;
    let end = (&raw const crate::arch::aarch64::mmu::__kernel_end) as usize;
    crate::dt::MemRange {
        base: start,
        size: end - start,
    }
}

fn init_heap(plat: &Platform) {
    let image = kernel_image();
    // `kernel_main` checked that a bank holds the image.
    let Ok(bank) = plat.bank_holding(image) else {
        return;
    };
    // What is free after the image: the map's whole 2 MiB blocks, below the DTB and any
    // reserved region.
    let Some(free) = plat.free_ram_from(bank, image.end(), heap::HEAP_MAX) else {
        crate::println!(
            "heap: no room after the kernel (end {:#x}, RAM {})",
            image.end(),
            bank
        );
        return;
    };
    // The board's firmware carve-outs, which the DT does not list (HiKey960's BL31 and
    // OP-TEE): the heap stops below the first one and starts above any covering its start.
    let carve: heapless::Vec<crate::dt::MemRange, 16> = board()
        .carve_outs
        .iter()
        .map(|r| r.range)
        .take(16)
        .collect();
    let Some((start, end)) = crate::board::free_window(free.base, free.end(), &carve, 4096) else {
        crate::println!("heap: no room after the kernel clear of the board's carve-outs");
        return;
    };
    let free = crate::dt::MemRange {
        base: start,
        size: (end & !0xfff) - start,
    };
    // SAFETY: `free` is RAM of a bank the final map covers, past the kernel image, BSS and
    // stacks, clear of the DTB, every reserved region and the board's carve-outs, used by
    // nothing else.
    unsafe { heap::init(free.base, free.size) };
    crate::log_info!("heap {=usize:#x}..{=usize:#x}", free.base, free.end());
}

fn init_console_rx(plat: &Platform) {
    let intid = crate::gic::IntId(plat.uart.intid);
    let res = crate::gic::register_handler(intid, |_| console::on_rx_irq())
        .and_then(|()| crate::gic::enable_irq(intid));
    match res {
        Ok(()) => console::enable_rx_irq(),
        Err(e) => crate::println!("console: receive interrupt unavailable: {}", e),
    }
}

fn banner(plat: &Platform, cmd: &Cmdline) {
    crate::println!("asym {} on {}", env!("CARGO_PKG_VERSION"), board().name);
    let mut banks: heapless::String<160> = heapless::String::new();
    for (i, b) in plat.memory.iter().enumerate() {
        let sep = if i == 0 { "" } else { " + " };
        let _ = core::fmt::write(&mut banks, format_args!("{sep}{b}"));
    }
    crate::println!("memory {}, console PL011 at {:#x}", banks, plat.uart.base);
    for (i, c) in plat.cpus.iter().enumerate() {
        let id = CpuId(i as u16);
        crate::println!(
            "cpu {}: MPIDR {:#x} cluster {} capacity {} {}",
            i,
            c.mpidr,
            c.cluster,
            crate::sched::capacity_orig(id).0,
            if crate::smp::is_online(id) {
                "online"
            } else {
                "offline"
            }
        );
        crate::log_info!(
            "cpu {=usize}: mpidr {=u64:#x} cluster {=u16} online {=bool}",
            i,
            c.mpidr,
            c.cluster,
            crate::smp::is_online(id)
        );
    }
    crate::println!(
        "{} of {} CPUs online",
        crate::smp::online_count(),
        plat.cpus.len()
    );
    crate::println!(
        "{}, timer {} Hz, HZ={}",
        plat.gic,
        crate::timer::counter_freq_hz(),
        cmd.hz
    );
    crate::log_info!(
        "GICv{=u8}, timer {=u64} Hz, HZ={=u32}",
        plat.gic.version(),
        crate::timer::counter_freq_hz(),
        cmd.hz
    );
    crate::sched::print_banner();
}

/// `crash=`: fails on purpose on the highest online CPU (in its call-function IPI handler, so
/// also from interrupt context), to show a failure there ends the run with a non-zero status.
fn crash(kind: crate::cmdline::CrashKind) {
    use crate::cmdline::CrashKind;
    /// An address the identity map leaves unmapped (see selftests/fault.rs).
    const UNMAPPED: usize = 0x40_0000_0000;
    fn do_panic(cpu: CpuId) {
        panic!("deliberate panic (crash=panic) on cpu {}", cpu.0);
    }
    fn do_fault(_cpu: CpuId) {
        // SAFETY: none needed for soundness: the load faults and the fault ends the run.
        let _ = unsafe { core::ptr::read_volatile(UNMAPPED as *const u64) };
    }
    fn do_stack_overflow(cpu: CpuId) {
        /// Recurses until the stack guard page stops it; `black_box` keeps the frames real.
        #[allow(unconditional_recursion)] // the point: only the guard page ends it
        fn recurse(depth: u64) -> u64 {
            let frame = core::hint::black_box([depth; 16]);
            frame[(depth % 16) as usize] + recurse(core::hint::black_box(depth + 1))
        }
        let _ = core::hint::black_box(recurse(u64::from(cpu.0)));
    }
    fn do_nested(cpu: CpuId) {
        arch::aarch64::exceptions::inject_fault_in_reports();
        do_fault(cpu);
    }
    fn do_locked(_cpu: CpuId) {
        /// Faults while `println!` formats it, that is with the console lock held.
        struct FaultsWhenShown;
        impl core::fmt::Display for FaultsWhenShown {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                // SAFETY: none needed for soundness: the load faults and the fault ends the run.
                let v = unsafe { core::ptr::read_volatile(UNMAPPED as *const u64) };
                write!(f, "{v}")
            }
        }
        crate::println!("crash: value {}", FaultsWhenShown);
    }
    fn do_park(cpu: CpuId) {
        crate::smp::park_this_cpu(cpu);
    }
    fn do_hold_console(cpu: CpuId) {
        console::take_lock_forever();
        crate::smp::park_this_cpu(cpu);
    }
    fn do_lock_order(cpu: CpuId) {
        use crate::sync::{IrqSpinLock, LockRank};
        let outer = IrqSpinLock::with_rank((), LockRank::CONSOLE);
        let inner = IrqSpinLock::with_rank((), LockRank::WAIT_QUEUE);
        let _o = outer.lock();
        let _i = inner.lock();
        crate::println!(
            "crash: cpu {} took a rank {} lock inside a rank {} one unchecked",
            cpu.0,
            inner.rank().0,
            outer.rank().0
        );
    }
    let target = crate::smp::online_cpus().last().unwrap_or(CpuId(0));
    crate::println!(
        "crash: {:?} on cpu {} at {} us",
        kind,
        target.0,
        arch::uptime_us()
    );
    let f: fn(CpuId) = match kind {
        CrashKind::Panic => do_panic,
        CrashKind::Fault => do_fault,
        CrashKind::Stack => do_stack_overflow,
        CrashKind::Nested => do_nested,
        CrashKind::Locked => do_locked,
        CrashKind::Park => do_park,
        CrashKind::Held => do_hold_console,
        CrashKind::Deaf => crate::gic::mask_this_cpu_for,
        CrashKind::LockOrder => do_lock_order,
    };
    if kind == CrashKind::Deaf {
        if let Err(e) = crate::smp::run_on(target, f) {
            crate::println!("crash: cpu {} could not be made deaf: {}", target.0, e);
            return;
        }
        match crate::smp::run_on(target, |_| {}) {
            Ok(()) => crate::println!("crash: deaf cpu {} answered a cross call", target.0),
            Err(e) => crate::println!(
                "crash: cpu {} did not answer: {} (at {} us)",
                target.0,
                e,
                arch::uptime_us()
            ),
        }
        return;
    }
    if kind == CrashKind::Held {
        if let Err(e) = crate::smp::run_on_nowait(target, f) {
            crate::println!(
                "crash: cpu {} could not take the console lock: {}",
                target.0,
                e
            );
            return;
        }
        // Up to 0.1 s of guest time for the target to take it; nothing prints meanwhile.
        let until = arch::counter().saturating_add(arch::counter_freq_hz() / 10);
        while !console::locked_elsewhere() && arch::counter() < until {
            core::hint::spin_loop();
        }
        let held = console::locked_elsewhere();
        panic!(
            "deliberate panic (crash=held) on cpu {}: cpu {} {} the console lock",
            crate::percpu::current_cpu().0,
            target.0,
            if held { "holds" } else { "did not take" }
        );
    }
    if kind == CrashKind::Park {
        // The target parks inside the call and never reports it done: post it, do not wait.
        if let Err(e) = crate::smp::run_on_nowait(target, f) {
            crate::println!("crash: cpu {} could not be parked: {}", target.0, e);
            return;
        }
        // A parked CPU must be idle (it wakes for nothing), which also lets -icount skip
        // idle guest time: count its wake-ups over 100 ms of guest time.
        const WINDOW_US: u64 = 100_000;
        let until = arch::counter().saturating_add(arch::counter_freq_hz() / 10);
        while crate::smp::is_online(target) && arch::counter() < until {
            arch::wfi();
        }
        let before = arch::park_wakes(target.index());
        let until = arch::counter().saturating_add(arch::counter_freq_hz() * WINDOW_US / 1_000_000);
        while arch::counter() < until {
            arch::wfi();
        }
        crate::println!(
            "crash: parked cpu {} woke {} times in {} us",
            target.0,
            arch::park_wakes(target.index()) - before,
            WINDOW_US
        );
        return;
    }
    if let Err(e) = crate::smp::run_on(target, f) {
        crate::println!("crash: cpu {} did not finish: {:?}", target.0, e);
    }
}

/// Echoes console input and prints every CPU's tick count once a second of guest time; with
/// `ticks=N`, once after N tick periods, then ends the run. (An idle CPU with nothing due stops
/// its tick, so the counts are ticks taken, not time.)
fn tick_loop(plat: &Platform, cmd: &Cmdline) -> ! {
    wait_first_tick(plat);
    let nr = plat.cpus.len();
    let period = 1_000_000_000 / u64::from(cmd.hz.max(1));
    let start = crate::sched::now().0;
    let end = cmd.ticks.map(|n| start + n.saturating_mul(period));
    let mut next_report = start + 1_000_000_000;
    loop {
        crate::sched::sleep_ns(period);
        while let Some(b) = console::read_byte() {
            // Interrupt-driven receive: show what arrived (printable ASCII as is).
            if b.is_ascii_graphic() {
                crate::println!("console: received '{}'", b as char);
            } else {
                crate::println!("console: received {:#04x}", b);
            }
        }
        let t = crate::sched::now().0;
        if let Some(end) = end {
            if t >= end {
                print_ticks(nr);
                crate::panic::end_run(0);
            }
        } else if t >= next_report {
            print_ticks(nr);
            next_report += 1_000_000_000;
        }
    }
}

fn print_ticks(nr: usize) {
    let mut line: heapless::String<256> = heapless::String::new();
    for i in 0..nr {
        let _ = core::fmt::write(
            &mut line,
            format_args!(" cpu{}={}", i, crate::timer::ticks(CpuId(i as u16))),
        );
    }
    crate::println!("ticks:{} at {} us", line, arch::uptime_us());
}
