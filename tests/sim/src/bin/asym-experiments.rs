//! `asym-experiments [--quick] [--seed 000|001|002|003|004|energy] [--write FILE]`: run the
//! seeds' experiments in the simulator (`asym_sim::experiments`), print the generated
//! Markdown block, or splice it into FILE (`docs/experiments.md`) and draw its charts into
//! `experiments/` beside FILE. Exits 1 when a check
//! (a must-show) fails, after printing or writing everything.

use std::process::ExitCode;

use asym_sim::experiments::{render, run_all, splice, Opts};

fn usage() -> &'static str {
    "usage: asym-experiments [--quick] [--seed 000|001|002|003|004|energy] [--write FILE]"
}

fn main() -> ExitCode {
    let mut o = Opts::default();
    let mut write = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--seed" => {
                let Some(v) = args.next() else {
                    eprintln!("asym-experiments: --seed needs a value\n{}", usage());
                    return ExitCode::from(2);
                };
                o.seed = Some(match v.as_str() {
                    "energy" => 5,
                    s => match s.parse::<u32>() {
                        Ok(n) if n <= 4 => n,
                        _ => {
                            eprintln!(
                                "asym-experiments: --seed \"{v}\": not 000..004 or energy\n{}",
                                usage()
                            );
                            return ExitCode::from(2);
                        }
                    },
                });
            }
            "--write" => match args.next() {
                Some(p) => write = Some(p),
                None => {
                    eprintln!("asym-experiments: --write needs a file\n{}", usage());
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!(
                    "asym-experiments: unknown argument \"{other}\"\n{}",
                    usage()
                );
                return ExitCode::from(2);
            }
        }
    }
    let sections = match run_all(o) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("asym-experiments: {e}");
            return ExitCode::FAILURE;
        }
    };
    let block = render(o, &sections);
    match &write {
        Some(p) => {
            let doc = match std::fs::read_to_string(p) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("asym-experiments: {p}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let new = match splice(&doc, &block) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("asym-experiments: {p}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Err(e) = std::fs::write(p, new) {
                eprintln!("asym-experiments: {p}: {e}");
                return ExitCode::FAILURE;
            }
            println!("asym-experiments: wrote the generated block of {p}");
            // The charts go to `experiments/` beside the document, where its Markdown
            // points.
            let dir = std::path::Path::new(p)
                .parent()
                .unwrap_or(std::path::Path::new("."))
                .join("experiments");
            if let Err(e) = std::fs::create_dir_all(&dir) {
                eprintln!("asym-experiments: {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
            for c in sections.iter().flat_map(|s| &s.charts) {
                if let Err(e) = c.draw(&dir.join(&c.file)) {
                    eprintln!("asym-experiments: {e}");
                    return ExitCode::FAILURE;
                }
                println!("asym-experiments: drew {}", dir.join(&c.file).display());
            }
        }
        None => println!("{block}"),
    }
    let failed: Vec<_> = sections
        .iter()
        .flat_map(|s| &s.checks)
        .filter(|c| !c.ok)
        .collect();
    let total: usize = sections.iter().map(|s| s.checks.len()).sum();
    for c in &failed {
        eprintln!("asym-experiments: check FAILS: {}", c.what);
    }
    println!(
        "asym-experiments: {} of {total} checks hold",
        total - failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
