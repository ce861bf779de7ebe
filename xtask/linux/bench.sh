# The measurements of `cargo xtask bench --vs-linux` inside Linux (busybox sh). /init (the
# probe) has printed `RESULT bench=boot ...` and exec'd this script; xtask prepends the
# parameters (IDLE_S LOAD_S ROUNDS HB_GROUPS HB_LOOPS LOAD_THREADS CPU_A CPU_B). Every
# measurement prints one `RESULT bench=<name> key=value ...` line (or `... error=<why>`), the
# last line is `RESULT bench=done`, then the machine powers off. Under `-icount shift=0` a guest
# ns is one guest instruction.
export PATH=/bin:/usr/bin
export LD_LIBRARY_PATH=/lib/aarch64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
probe=/bin/asym-linux-probe

# One row of /proc/softirqs (`SCHED`, `TIMER`) as a comma list of per-CPU counts.
softirq() {
    grep "^ *$1:" /proc/softirqs | {
        read -r _ counts
        echo $counts | tr ' ' ,
    }
}

# phase NAME COMMAND...: SCHED and TIMER softirqs before and after COMMAND, and its guest ns.
phase() {
    name=$1
    shift
    s0=$(softirq SCHED)
    t0=$(softirq TIMER)
    n0=$($probe now)
    "$@" >/dev/null 2>&1
    rc=$?
    n1=$($probe now)
    s1=$(softirq SCHED)
    t1=$(softirq TIMER)
    if [ $rc -ne 0 ]; then
        echo "RESULT bench=$name error=exit_status_$rc"
        return
    fi
    echo "RESULT bench=$name ns=$((n1 - n0)) sched_before=$s0 sched_after=$s1 timer_before=$t0 timer_after=$t1"
}

# What Linux made of the machine: its CPUs' capacities (from the DT's capacity-dmips-mhz) and
# whether any cpufreq driver bound (none on QEMU virt: no clocks to scale).
caps=$(cat /sys/devices/system/cpu/cpu[0-9]*/cpu_capacity 2>/dev/null | tr '\n' ,)
cpufreq=none
[ -d /sys/devices/system/cpu/cpufreq/policy0 ] && cpufreq=yes
echo "RESULT bench=kernel release=$(uname -r) cpus=$(grep -c ^processor /proc/cpuinfo) capacity=${caps%,} cpufreq=$cpufreq"

# The sched domains Linux built (debugfs, CONFIG_SCHED_DEBUG): per CPU, each level's name and
# balance intervals in ms, lowest level first, e.g. cpu0=MC:2-4/DIE:6-12. The domains decide
# how often SCHED_SOFTIRQ is raised, so the softirq rows compare only if both kernels built
# the same levels (asym's are printed by its boot log).
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
doms=
for c in /sys/kernel/debug/sched/domains/cpu[0-9]*; do
    levels=
    for d in "$c"/domain[0-9]*; do
        [ -d "$d" ] || continue
        levels="$levels/$(cat "$d/name"):$(cat "$d/min_interval")-$(cat "$d/max_interval")"
    done
    doms="$doms ${c##*/}=${levels#/}"
done
if [ -n "$doms" ]; then
    echo "RESULT bench=domains$doms"
else
    echo "RESULT bench=domains error=no_debugfs_sched_domains"
fi

# Let the end of boot (deferred work, the first NOHZ balances) settle before measuring idle.
sleep 1
phase softirq_idle sleep "$IDLE_S"
phase softirq_cyclictest cyclictest -q -t"$LOAD_THREADS" -i100 -D"$LOAD_S"

$probe pingpong pingpong_same "$CPU_A" "$CPU_A" "$ROUNDS" ||
    echo "RESULT bench=pingpong_same error=exit_status_$?"
$probe pingpong pingpong_cross "$CPU_A" "$CPU_B" "$ROUNDS" ||
    echo "RESULT bench=pingpong_cross error=exit_status_$?"

n0=$($probe now)
out=$(hackbench -T -p -g "$HB_GROUPS" -l "$HB_LOOPS" 2>&1)
rc=$?
n1=$($probe now)
secs=$(echo "$out" | sed -n 's/^Time: *//p')
if [ $rc -eq 0 ] && [ -n "$secs" ]; then
    echo "RESULT bench=hackbench groups=$HB_GROUPS loops=$HB_LOOPS seconds=$secs outer_ns=$((n1 - n0))"
else
    echo "RESULT bench=hackbench error=exit_status_$rc"
    echo "$out"
fi

echo "RESULT bench=done"
poweroff -f
