//! docs/design.md names every module of every crate, and nothing that is gone. Each crate (the binary's
//! `src/` and every workspace member of the root Cargo.toml) has a section whose heading names its folder
//! (`` ### `proto/` ``); in it every module is named by its path under the crate's `src/`, in backticks
//! (`` `telemetry/wire.rs` ``). The test lists every `.rs` file of a crate's `src/` missing from its
//! section, and every `.rs` path a section names that does not exist, so that the layout a newcomer
//! reads cannot drift from the tree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, root: &Path, found: &mut BTreeSet<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, root, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under its root");
            found.insert(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The workspace members' folders, from the root Cargo.toml's `members = [...]`, and the binary's `.`.
fn crates(manifest: &str) -> Vec<String> {
    let members = manifest.lines().find_map(|line| line.trim().strip_prefix("members = [")).expect("the root Cargo.toml lists its members on one line");
    let mut crates: Vec<String> = members.split(',').map(|m| m.trim().trim_end_matches(']').trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect();
    crates.insert(0, ".".to_string());
    crates
}

/// The text of the section whose `###` heading names `folder` in backticks, up to the next heading.
fn section<'a>(doc: &'a str, folder: &str) -> Option<&'a str> {
    let heading = format!("`{folder}/`");
    let start = doc.lines().position(|line| line.starts_with("### ") && line.contains(&heading))?;
    let lines: Vec<&str> = doc.lines().collect();
    let end = lines[start + 1..].iter().position(|line| line.starts_with("## ") || line.starts_with("### ")).map_or(lines.len(), |at| start + 1 + at);
    let from = lines[..start].iter().map(|line| line.len() + 1).sum::<usize>();
    let to = lines[..end].iter().map(|line| line.len() + 1).sum::<usize>().min(doc.len());
    Some(&doc[from..to])
}

/// The `.rs` paths a section names in backticks.
fn named(section: &str) -> BTreeSet<String> {
    section.split('`').skip(1).step_by(2).filter(|token| token.ends_with(".rs") && !token.contains(' ')).map(str::to_string).collect()
}

#[test]
fn the_design_doc_names_every_module_of_every_crate() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let crates = crates(&manifest);
    assert!(crates.len() > 5, "too few crates found in Cargo.toml: {crates:?}");
    let mut problems = Vec::new();
    for folder in &crates {
        let shown = if folder == "." { "src".to_string() } else { folder.clone() };
        let src = root.join(folder).join("src");
        let mut files = BTreeSet::new();
        rust_files(&src, &src, &mut files);
        assert!(!files.is_empty(), "no .rs file under {}", src.display());
        let Some(text) = section(&doc, &shown) else {
            problems.push(format!("no section `### \\`{shown}/\\`` for the crate in {folder}"));
            continue;
        };
        let names = named(text);
        for file in files.difference(&names) {
            problems.push(format!("{shown}/: module `{file}` is not named in docs/design.md"));
        }
        for gone in names.difference(&files) {
            problems.push(format!("{shown}/: docs/design.md names `{gone}`, which is not a file of {}", src.display()));
        }
    }
    assert!(problems.is_empty(), "docs/design.md is out of date ({}):\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn the_section_reader_finds_modules_and_stops_at_the_next_heading() {
    let doc = "## Layout\n### `a/` one\n- `lib.rs`, `x/y.rs`: things; `not code`\n### `b/` two\n- `main.rs`\n";
    assert_eq!(named(section(doc, "a").expect("a")), ["lib.rs".to_string(), "x/y.rs".to_string()].into());
    assert_eq!(named(section(doc, "b").expect("b")), ["main.rs".to_string()].into());
    assert!(section(doc, "c").is_none());
    assert_eq!(crates("members = [\"proto\", \"ui\"]\n"), [".", "proto", "ui"]);
}
