//! The ABI crate against its contract, `docs/syscalls.md`: the table of calls there and
//! [`asym_abi::SYSCALLS`] name the same calls with the same numbers, and the limits and
//! clock ids the document states are the crate's.

use asym_abi::*;

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/syscalls.md");
    std::fs::read_to_string(path).expect("docs/syscalls.md")
}

/// `(nr, name)` of each row of the table whose header starts `| nr | name |`.
fn table_rows(doc: &str) -> Vec<(u64, String)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("| nr | name |") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(nr), Some(name)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        if let Ok(nr) = nr.parse::<u64>() {
            rows.push((nr, name.trim_matches('`').to_string()));
        }
    }
    rows
}

#[test]
fn the_documented_table_is_the_crates() {
    let rows = table_rows(&doc());
    let ours: Vec<(u64, String)> = SYSCALLS
        .iter()
        .map(|&(nr, name)| (nr, name.to_string()))
        .collect();
    assert_eq!(
        rows, ours,
        "docs/syscalls.md's table and asym_abi::SYSCALLS differ"
    );
}

#[test]
fn numbers_are_dense_and_in_order() {
    for (i, &(nr, _)) in SYSCALLS.iter().enumerate() {
        assert_eq!(nr, i as u64, "call {i} has number {nr}");
    }
    assert_eq!(SYSCALLS.len() as u64, NR_SYSCALLS);
}

#[test]
fn documented_limits_and_clock_ids_match() {
    let doc = doc();
    assert!(
        doc.contains(&format!("`len` > {WRITE_MAX}")),
        "write's limit"
    );
    assert!(
        doc.contains(&format!(
            "`which` ({THREAD_CLOCK_CPUTIME}: `CPUTIME`, {THREAD_CLOCK_WORK}: `WORK`)"
        )),
        "thread_clock's clock ids"
    );
}
