//! The `trace_marker` lines an rt-app thread writes (rt-app `src/rt-app.c`, its
//! `log_ftrace` calls), for the categories `task`, `loop` and `stats` (and
//! `rtapp_main: event=clock_ref`, which rt-app logs under `task` from its first thread).
//! LISA's rt-app analysis reads exactly these texts.

use core::fmt;

/// One rt-app trace marker. Times are µs, as rt-app prints them.
///
/// `repr(C)`: the tag in a word of its own and every field at an 8-byte offset. With Rust's
/// packed layout (`Loop`'s `start` in the byte after the tag) the interpreter's copies of a
/// marker were odd-sized pieces at odd offsets, read back right after being written in other
/// sizes: loads the CPU cannot forward from its store buffer (perf, in the simulator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub enum Marker {
    /// `rtapp_main: event=clock_ref data=%llu`: the first thread's `t_zero` (µs of
    /// `CLOCK_MONOTONIC`).
    ClockRef {
        /// `t_zero` in µs.
        data_us: u64,
    },
    /// `rtapp_task: event=start`.
    TaskStart,
    /// `rtapp_task: event=end`.
    TaskEnd,
    /// `rtapp_loop: event=start|end thread_loop=%d phase=%d phase_loop=%d`.
    Loop {
        /// `start` (true) or `end`.
        start: bool,
        /// Iteration of the task's phase list.
        thread_loop: u64,
        /// Phase index.
        phase: usize,
        /// Iteration of the phase.
        phase_loop: u64,
    },
    /// `rtapp_stats: period=%d run=%d wu_lat=%d slack=%d c_period=%d c_run=%d` after each
    /// phase iteration (see `thread_body` and `run_event` in rt-app).
    Stats {
        /// Wall time of the iteration (µs).
        period: i64,
        /// Wall time of its `run`/`runtime` events (µs).
        run: i64,
        /// Timer wake-up latency (µs).
        wu_lat: i64,
        /// Time left to the timer's next period when it was reached (µs; negative if
        /// late).
        slack: i64,
        /// Configured timer period(s) (µs).
        c_period: i64,
        /// Configured run time (µs).
        c_run: i64,
    },
}

impl Marker {
    /// The marker a `trace_marker` write holds if it is one of rt-app's, in exactly the text
    /// [`Display`](fmt::Display) writes (one trailing newline allowed, as rt-app's
    /// `log_ftrace` ends each line with one): the inverse of `Display`. Numbers are decimal,
    /// `-` only where rt-app prints a signed `%d`, in the ranges rt-app prints them in
    /// (`%llu` for `clock_ref`, `%d` elsewhere). Anything else is `None`.
    pub fn parse(text: &str) -> Option<Marker> {
        let line = text.strip_suffix('\n').unwrap_or(text);
        if let Some(v) = line.strip_prefix("rtapp_main: event=clock_ref data=") {
            return Some(Marker::ClockRef {
                data_us: unsigned(v)?,
            });
        }
        match line {
            "rtapp_task: event=start" => return Some(Marker::TaskStart),
            "rtapp_task: event=end" => return Some(Marker::TaskEnd),
            _ => {}
        }
        if let Some(rest) = line.strip_prefix("rtapp_loop: event=") {
            let (event, rest) = rest.split_once(' ')?;
            let start = match event {
                "start" => true,
                "end" => false,
                _ => return None,
            };
            let [thread_loop, phase, phase_loop] =
                fields(rest, ["thread_loop", "phase", "phase_loop"])?;
            let int = |v: &str| u64::try_from(signed(v)?).ok();
            return Some(Marker::Loop {
                start,
                thread_loop: int(thread_loop)?,
                phase: usize::try_from(int(phase)?).ok()?,
                phase_loop: int(phase_loop)?,
            });
        }
        let rest = line.strip_prefix("rtapp_stats: ")?;
        let [period, run, wu_lat, slack, c_period, c_run] = fields(
            rest,
            ["period", "run", "wu_lat", "slack", "c_period", "c_run"],
        )?;
        Some(Marker::Stats {
            period: signed(period)?,
            run: signed(run)?,
            wu_lat: signed(wu_lat)?,
            slack: signed(slack)?,
            c_period: signed(c_period)?,
            c_run: signed(c_run)?,
        })
    }
}

/// `N` space-separated `name=value` fields, in this order and no others: the values.
fn fields<'a, const N: usize>(s: &'a str, names: [&str; N]) -> Option<[&'a str; N]> {
    let mut out = [""; N];
    let mut it = s.split(' ');
    for (o, name) in out.iter_mut().zip(names) {
        let (k, v) = it.next()?.split_once('=')?;
        if k != name {
            return None;
        }
        *o = v;
    }
    it.next().is_none().then_some(out)
}

/// A `%llu`: decimal digits only (no sign, no spaces).
fn unsigned(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// A `%d`: an optional `-`, then decimal digits, within `i32`.
fn signed(v: &str) -> Option<i64> {
    let digits = v.strip_prefix('-').unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<i32>().ok().map(i64::from)
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Marker::ClockRef { data_us } => write!(f, "rtapp_main: event=clock_ref data={data_us}"),
            Marker::TaskStart => f.write_str("rtapp_task: event=start"),
            Marker::TaskEnd => f.write_str("rtapp_task: event=end"),
            Marker::Loop {
                start,
                thread_loop,
                phase,
                phase_loop,
            } => write!(
                f,
                "rtapp_loop: event={} thread_loop={thread_loop} phase={phase} phase_loop={phase_loop}",
                if start { "start" } else { "end" }
            ),
            Marker::Stats {
                period,
                run,
                wu_lat,
                slack,
                c_period,
                c_run,
            } => write!(
                f,
                "rtapp_stats: period={period} run={run} wu_lat={wu_lat} slack={slack} c_period={c_period} c_run={c_run}"
            ),
        }
    }
}

/// Longest text [`Marker::text`] writes (`rtapp_stats` with six 20-character numbers).
pub const TEXT_MAX: usize = 192;

/// A marker's text in a fixed buffer: what [`Display`](fmt::Display) writes, byte for byte,
/// without `core::fmt` (an EL0 executor writes one per `trace_marker` call, three per loop;
/// formatting through `core::fmt` cost it ~5000 instructions each).
#[derive(Clone, Copy)]
pub struct MarkerText {
    buf: [u8; TEXT_MAX],
    len: usize,
}

impl fmt::Debug for MarkerText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Default for MarkerText {
    fn default() -> Self {
        Self::new()
    }
}

impl MarkerText {
    /// An empty text.
    pub const fn new() -> Self {
        MarkerText {
            buf: [0; TEXT_MAX],
            len: 0,
        }
    }

    /// The text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The text (always ASCII).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    // Byte loops rather than `copy_from_slice` and a digit buffer: the pieces are a few bytes,
    // and a `memcpy`/`memset` call per piece was most of the cost on the bare-metal target.
    fn put(&mut self, s: &str) {
        for &b in s.as_bytes() {
            if self.len < TEXT_MAX {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }

    fn unsigned(&mut self, v: u64) {
        let mut digits = 1;
        let mut rest = v / 10;
        while rest != 0 {
            digits += 1;
            rest /= 10;
        }
        let end = (self.len + digits).min(TEXT_MAX);
        let mut at = self.len + digits;
        let mut v = v;
        while at > self.len {
            at -= 1;
            if at < end {
                self.buf[at] = b'0' + (v % 10) as u8;
            }
            v /= 10;
        }
        self.len = end;
    }

    fn signed(&mut self, v: i64) {
        if v < 0 {
            self.put("-");
        }
        self.unsigned(v.unsigned_abs());
    }
}

impl Marker {
    /// The marker's text, exactly as [`Display`](fmt::Display) writes it.
    pub fn text(&self) -> MarkerText {
        let mut t = MarkerText::new();
        self.write_text(&mut t);
        t
    }

    /// Replaces `t` with the marker's text (as [`Marker::text`], into a buffer the caller
    /// keeps: no 192-byte buffer to clear and return per marker).
    pub fn write_text(&self, t: &mut MarkerText) {
        t.len = 0;
        match *self {
            Marker::ClockRef { data_us } => {
                t.put("rtapp_main: event=clock_ref data=");
                t.unsigned(data_us);
            }
            Marker::TaskStart => t.put("rtapp_task: event=start"),
            Marker::TaskEnd => t.put("rtapp_task: event=end"),
            Marker::Loop {
                start,
                thread_loop,
                phase,
                phase_loop,
            } => {
                t.put(if start {
                    "rtapp_loop: event=start thread_loop="
                } else {
                    "rtapp_loop: event=end thread_loop="
                });
                t.unsigned(thread_loop);
                t.put(" phase=");
                t.unsigned(phase as u64);
                t.put(" phase_loop=");
                t.unsigned(phase_loop);
            }
            Marker::Stats {
                period,
                run,
                wu_lat,
                slack,
                c_period,
                c_run,
            } => {
                for (name, v) in [
                    ("rtapp_stats: period=", period),
                    (" run=", run),
                    (" wu_lat=", wu_lat),
                    (" slack=", slack),
                    (" c_period=", c_period),
                    (" c_run=", c_run),
                ] {
                    t.put(name);
                    t.signed(v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::string::ToString;

    fn all() -> [Marker; 6] {
        [
            Marker::ClockRef { data_us: u64::MAX },
            Marker::TaskStart,
            Marker::TaskEnd,
            Marker::Loop {
                start: true,
                thread_loop: 7,
                phase: 2,
                phase_loop: 0,
            },
            Marker::Loop {
                start: false,
                thread_loop: i32::MAX as u64,
                phase: 0,
                phase_loop: 3,
            },
            Marker::Stats {
                period: 16000,
                run: 1650,
                wu_lat: 0,
                slack: i64::from(i32::MIN),
                c_period: 16000,
                c_run: 1600,
            },
        ]
    }

    #[test]
    fn text_is_display_byte_for_byte() {
        let mut ms = std::vec::Vec::from(all());
        for v in [
            0i64,
            1,
            9,
            10,
            -1,
            -10,
            1234567,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ] {
            ms.push(Marker::Stats {
                period: v,
                run: -v.saturating_abs(),
                wu_lat: v / 7,
                slack: v,
                c_period: v / 3,
                c_run: v,
            });
            ms.push(Marker::Loop {
                start: v % 2 == 0,
                thread_loop: v.unsigned_abs(),
                phase: (v.unsigned_abs() % 1000) as usize,
                phase_loop: u64::MAX - v.unsigned_abs(),
            });
            ms.push(Marker::ClockRef {
                data_us: v.unsigned_abs(),
            });
        }
        ms.push(Marker::Loop {
            start: true,
            thread_loop: u64::MAX,
            phase: usize::MAX,
            phase_loop: u64::MAX,
        });
        for m in ms {
            assert_eq!(m.text().as_str(), m.to_string());
        }
    }

    #[test]
    fn parse_is_the_inverse_of_display() {
        for m in all() {
            let text = m.to_string();
            assert_eq!(Marker::parse(&text), Some(m), "{text}");
            let line = text.clone() + "\n";
            assert_eq!(Marker::parse(&line), Some(m), "{line:?}");
        }
    }

    #[test]
    fn anything_else_is_not_an_rtapp_marker() {
        for text in [
            "",
            "hello",
            "rtapp_task: event=start\n\n",
            "rtapp_task: event=begin",
            "rtapp_main: event=clock_ref data=",
            "rtapp_main: event=clock_ref data=-1",
            "rtapp_main: event=clock_ref data=+1",
            "rtapp_main: event=clock_ref data=18446744073709551616",
            "rtapp_loop: event=start thread_loop=1 phase=0",
            "rtapp_loop: event=start thread_loop=1 phase=0 phase_loop=0 x=1",
            "rtapp_loop: event=start phase=0 thread_loop=1 phase_loop=0",
            "rtapp_loop: event=middle thread_loop=1 phase=0 phase_loop=0",
            "rtapp_loop: event=end thread_loop=-1 phase=0 phase_loop=0",
            "rtapp_loop: event=end thread_loop=2147483648 phase=0 phase_loop=0",
            "rtapp_stats: period=1 run=2 wu_lat=3 slack=4 c_period=5",
            "rtapp_stats: period=1 run=2 wu_lat=3 slack=4 c_period=5 c_run=6 ",
            "rtapp_stats: period=1 run=2 wu_lat=3 slack=- c_period=5 c_run=6",
            "rtapp_stats: period=1 run=2 wu_lat=3 slack=4 c_period=5 c_run=2147483648",
            " rtapp_task: event=end",
        ] {
            assert_eq!(Marker::parse(text), None, "{text:?}");
        }
    }
}
