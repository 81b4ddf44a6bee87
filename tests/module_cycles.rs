//! No crate's modules import each other in a cycle: the binary's (`src/`) and every workspace member's
//! (`proto/src/`, `transports/fabric/src/`, ...), at every level. Under each module (the crate's root
//! included) its child modules are the nodes (`monitor/fleet.rs` with its `monitor/fleet/` folder is one),
//! and every path in code that names a sibling, through `crate::`, `super::` or `self::` (also inside
//! `use super::{x, y::z}`), an edge; comments, doc links included, are not imports. A cycle fails the test
//! and is named, so the layering cannot quietly regress.

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


/// The paths `text`'s code names through `crate::`, `super::` and `self::`, as paths from the crate's
/// root (`file` is the module the text is of): `use super::{a, b::{c, d}}` in `x::y` names `x::a`,
/// `x::b::c` and `x::b::d`. Each path runs to its last segment; which prefix is a module is decided later.
pub fn named_paths(text: &str, file: &[String]) -> BTreeSet<Vec<String>> {
    let code = code_of(text);
    let mut paths = BTreeSet::new();
    let mut at = 0;
    while let Some((offset, key)) = ["crate::", "super::", "self::"].iter().filter_map(|key| code[at..].find(key).map(|i| (i, *key))).min() {
        let start = at + offset;
        at = start + key.len();
        if code[..start].chars().next_back().is_some_and(|c| is_ident(c) || c == '$') {
            continue; // `efatop_crate::`, `$crate::`, `myself::`
        }
        let mut base: Vec<String> = match key {
            "crate::" => Vec::new(),
            "self::" => file.to_vec(),
            _ => file[..file.len().saturating_sub(1)].to_vec(),
        };
        while key == "super::" && code[at..].starts_with("super::") {
            base.pop();
            at += "super::".len();
        }
        use_tree(&code[at..], base, &mut paths);
    }
    paths
}

/// The paths of one use tree (`a::b`, `a::{b, c::d}`) under `base`, into `paths`.
fn use_tree(text: &str, mut base: Vec<String>, paths: &mut BTreeSet<Vec<String>>) {
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            // Each item at the top level of the braces is a tree of its own.
            let mut depth = 0usize;
            let mut item = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        use_tree(group[item..i].trim_start(), base.clone(), paths);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        use_tree(group[item..i].trim_start(), base.clone(), paths);
                        item = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        base.push(name);
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    paths.insert(base);
}

/// The module a file under `src/` is (`["monitor", "fleet"]` for `monitor/fleet.rs`; empty for the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src").with_extension("");
    let mut path: Vec<String> = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if path.last().is_some_and(|last| last == "mod") || path == ["main"] || path == ["lib"] {
        path.pop();
    }
    path
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


/// The module graphs of the crate whose sources are under `src`, one per parent module (`""` the crate's
/// root): its child modules and which of them import which, a child's own submodules speaking for it. A
/// module naming itself, its parent or its own child is no edge: only siblings import each other in a cycle.
fn module_graphs(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files.iter().map(|file| (module_of(src, file), file.clone())).collect();
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, file) in &modules {
        if let Some((_, parent)) = module.split_last() {
            graphs.entry(parent.join("::")).or_default().entry(module.join("::")).or_default();
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        for mut target in named_paths(&text, module) {
            // The module a path names: its longest prefix that is one (`crate::SomeItem` at the root is none).
            while !target.is_empty() && !modules.contains_key(&target) {
                target.pop();
            }
            let common = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == module.len() || common == target.len() {
                continue;
            }
            let (from, to) = (module[..=common].join("::"), target[..=common].join("::"));
            graphs.entry(module[..common].join("::")).or_default().entry(from).or_default().insert(to);
        }
    }
    graphs
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
        for graph in module_graphs(src).values() {
            if let Some(cycle) = find_cycle(graph) {
                cycles.push(format!("{}: {}", src.strip_prefix(root).unwrap_or(src).display(), cycle.join(" → ")));
            }
        }
    }
    assert!(cycles.is_empty(), "modules import each other in a cycle:\n{}", cycles.join("\n"));
    let binary = module_graphs(&root.join("src"));
    assert!(binary.get("").is_some_and(|top| top.len() > 5), "no sources under src/");
    assert!(!binary[""].contains_key("output"), "src/output.rs is back: a rank's life is rank.rs, rank 0's session.rs");
    let ui = module_graphs(&root.join("ui/src"));
    assert!(ui.get("monitor").is_some_and(|monitor| monitor.contains_key("monitor::fleet")), "submodules are nodes too");
}

#[test]
fn the_checker_sees_grouped_relative_paths_and_cycles() {
    let file = ["monitor".to_string(), "nodes".to_string()];
    let paths = named_paths(
        "use crate::{bootstrap, cli::{A, b::C}, dashboard as d};\nuse super::fleet::{self, X};\nuse super::super::top;\nlet x = crate::launch::go();\nself::inner::f();\n$crate::no;\nmyself::no;\n//! see [`crate::docs`]\n    // crate::commented",
        &file,
    );
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        ["bootstrap", "cli::A", "cli::b::C", "dashboard", "launch::go", "monitor::fleet::X", "monitor::fleet::self", "monitor::nodes::inner::f", "top"]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_string(), BTreeSet::from([to.to_string()])))
        .collect();
    assert_eq!(find_cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let acyclic: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c")].into_iter().map(|(f, t)| (f.to_string(), BTreeSet::from([t.to_string()]))).collect();
    assert_eq!(find_cycle(&acyclic), None);
}
