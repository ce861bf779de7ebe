//! Random byte mutations of the bundled workloads (`tests/workloads/*.json`): the reader
//! never panics, and either succeeds or fails with one located message whose line and
//! column lie inside the text and whose path is a path into the document.

use asym_rtapp::json;
use asym_rtapp::workload;

/// The bundled workloads, embedded so the test needs no file system layout at run time.
const WORKLOADS: &[(&str, &str)] = &[
    (
        "camera-lb.json",
        include_str!("../../../tests/workloads/camera-lb.json"),
    ),
    (
        "camera.json",
        include_str!("../../../tests/workloads/camera.json"),
    ),
    (
        "cyclictest.json",
        include_str!("../../../tests/workloads/cyclictest.json"),
    ),
    (
        "jank.json",
        include_str!("../../../tests/workloads/jank.json"),
    ),
    (
        "messaging.json",
        include_str!("../../../tests/workloads/messaging.json"),
    ),
    (
        "periodic-big.json",
        include_str!("../../../tests/workloads/periodic-big.json"),
    ),
    (
        "periodic-small.json",
        include_str!("../../../tests/workloads/periodic-small.json"),
    ),
    (
        "ramp.json",
        include_str!("../../../tests/workloads/ramp.json"),
    ),
    (
        "uclamp-topapp.json",
        include_str!("../../../tests/workloads/uclamp-topapp.json"),
    ),
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Line and column of the end of `text` (the furthest position an error may name).
fn end_pos(text: &str) -> (u32, u32) {
    let line = text.matches('\n').count() as u32 + 1;
    let last = text.rsplit('\n').next().unwrap_or("");
    (line, last.chars().count() as u32 + 1)
}

#[test]
fn every_bundled_workload_parses() {
    for (name, text) in WORKLOADS {
        let w = workload::parse(text, name, 8).unwrap_or_else(|e| panic!("{e}"));
        assert!(!w.tasks.is_empty(), "{name}");
    }
}

#[test]
fn mutated_workloads_never_panic_and_errors_are_located() {
    const SPECIALS: &[u8] = b"{}[]:,\"-0123456789eE.+ \n\\/*truefalsnul";
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut err) = (0, 0);
    for round in 0..20_000 {
        let (_, base) = WORKLOADS[round % WORKLOADS.len()];
        let mut b = base.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(b.len());
            match rng.below(6) {
                0 => b[i] ^= 1 << rng.below(8),
                1 => {
                    b.remove(i);
                }
                2 => b.insert(i, SPECIALS[rng.below(SPECIALS.len())]),
                3 => b[i] = SPECIALS[rng.below(SPECIALS.len())],
                4 => {
                    // A long run of digits: numbers out of every range.
                    let n = 1 + rng.below(30);
                    b.splice(i..i, std::iter::repeat_n(b'9', n));
                }
                _ => {
                    let j = (i + rng.below(40)).min(b.len());
                    let span = b[i..j].to_vec();
                    b.splice(i..i, span);
                }
            }
        }
        let text = String::from_utf8_lossy(&b).into_owned();
        let (last_line, last_col) = end_pos(&text);
        let res = std::panic::catch_unwind(|| workload::parse(&text, "fuzz.json", 6));
        match res.unwrap_or_else(|_| panic!("reader panicked on:\n{text}")) {
            Ok(_) => ok += 1,
            Err(e) => {
                err += 1;
                let msg = e.to_string();
                assert!(msg.starts_with("fuzz.json:"), "{msg}");
                assert!(!msg.contains('\n'), "multi-line error: {msg}");
                assert!(e.line >= 1 && e.line <= last_line, "line {}: {msg}", e.line);
                assert!(e.col >= 1, "column 0: {msg}");
                if e.line == last_line {
                    assert!(e.col <= last_col, "column past the end: {msg}");
                }
            }
        }
    }
    // The mutations must exercise both outcomes.
    assert!(ok > 1000 && err > 5000, "ok {ok}, err {err}");
}

#[test]
fn json_reader_never_panics_on_random_bytes() {
    let mut rng = Rng(42);
    for _ in 0..20_000 {
        let n = rng.below(64);
        let bytes: Vec<u8> = (0..n)
            .map(|_| b"{}[]:,\"-0.5e+9 tfn\\u"[rng.below(20)])
            .collect();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let r = std::panic::catch_unwind(|| json::parse(&text));
        assert!(r.is_ok(), "json::parse panicked on {text:?}");
    }
}
