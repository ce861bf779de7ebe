//! In-kernel self tests, one module per area; each registers its tests with `selftest!`.

mod cmdline;
mod console;
mod fault;
mod gic;
mod heap;
mod ipi;
mod mmu;
mod smp;
mod stack;
mod sync;
mod timer;
// rt-app workloads and the trace, with the simulator's code.
mod rtapp;
mod uspace;
// EL0 tasks: faults kill only the task, system calls, isolation.
mod el0;
mod el0_clock;
mod el0_threads;
mod el0_trace;
// Scheduler and cpufreq (cpufreq before sched: sched's last test checks the run queues after both).
mod cpufreq;
mod dvfs;
mod sched;
// Energy-aware placement and load balancing with real threads.
mod balance;
mod eas;
// Threads: spawn/exit, context switch, sleep, wait/wake, preemption, overflow.
mod threads;
mod threads_tests;
// UART receive (registered to run last: it waits for the host).
mod uart;
