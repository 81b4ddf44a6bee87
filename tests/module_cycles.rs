//! No crate's modules import each other in a cycle: the binary's (`src/`) and every workspace member's
//! (`proto/src/`, `transports/fabric/src/`, ...). In each crate a top-level module (`src/x.rs` with its
//! `src/x/` folder) is a node, every `crate::x` path in code (also inside `use crate::{x, y::z}`) an edge;
//! comments, doc links included, are not imports. A cycle fails the test and is named, so the layering
//! cannot quietly regress.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `text` without its line comments (`//`, `///`, `//!`): a doc link to a module is not an import.
fn code_of(text: &str) -> String {
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The top-level modules `text`'s code names through `crate::`.
pub fn crate_paths(text: &str) -> BTreeSet<String> {
    let code = code_of(text);
    let mut names = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| is_ident(c) || c == '$') {
            continue; // `efatop_crate::`, `$crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d as e}`: the first segment of each item at the top level of the braces.
            let mut depth = 0usize;
            let mut item_start = true;
            let mut chars = group.char_indices().peekable();
            while let Some((i, c)) = chars.next() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && depth == 0 && is_ident(c) => {
                        let name: String = group[i..].chars().take_while(|c| is_ident(*c)).collect();
                        for _ in 1..name.len() {
                            chars.next();
                        }
                        names.insert(name);
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The top-level module a file under `src/` belongs to (`None` for the crate root).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "main" && name != "lib").then(|| name.to_string())
}

/// The first cycle found in `graph`, as the path of modules around it.
pub fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, graph, state, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

/// The module graph of the crate whose sources are under `src`: module → the modules it imports.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(src, file) else { continue };
        let text = std::fs::read_to_string(file).expect("readable source");
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(crate_paths(&text).into_iter().filter(|m| *m != module));
    }
    // Only edges to modules that exist (a `crate::SomeItem` re-exported at the root is not a module).
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|m| modules.contains(m));
    }
    graph
}

/// The binary's `src/` and each workspace member's `src/`, from the root manifest's `members`.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace manifest");
    let members = manifest
        .lines()
        .find_map(|line| line.trim().strip_prefix("members"))
        .and_then(|rest| Some(&rest[rest.find('[')? + 1..rest.find(']')?]))
        .expect("members = [...] on one line");
    let mut sources = vec![root.join("src")];
    sources.extend(members.split(',').map(|m| m.trim().trim_matches('"')).filter(|m| !m.is_empty()).map(|m| root.join(m).join("src")));
    sources
}

#[test]
fn no_crate_has_modules_that_import_each_other_in_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = crate_sources(root);
    assert!(sources.len() >= 10, "{sources:?}");
    let mut cycles = Vec::new();
    for src in &sources {
        let graph = module_graph(src);
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!("{}: {}", src.strip_prefix(root).unwrap_or(src).display(), cycle.join(" → ")));
        }
    }
    assert!(cycles.is_empty(), "modules import each other in a cycle:\n{}", cycles.join("\n"));
    let binary = module_graph(&root.join("src"));
    assert!(binary.len() > 5, "no sources under src/");
    assert!(!binary.contains_key("output"), "src/output.rs is back: a rank's life is rank.rs, rank 0's session.rs");
}

#[test]
fn the_checker_sees_grouped_paths_and_cycles() {
    let names = crate_paths(
        "use crate::{bootstrap, cli::{A, B}, dashboard as d};\nlet x = crate::launch::go();\n$crate::no;\n//! see [`crate::docs`]\n    // crate::commented",
    );
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["bootstrap", "cli", "dashboard", "launch"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_string(), BTreeSet::from([to.to_string()])))
        .collect();
    assert_eq!(find_cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let acyclic: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c")].into_iter().map(|(f, t)| (f.to_string(), BTreeSet::from([t.to_string()]))).collect();
    assert_eq!(find_cycle(&acyclic), None);
}
