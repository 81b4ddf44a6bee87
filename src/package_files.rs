//! `efatop package-files --out DIR` (hidden): the man pages and shell completions that the .deb and .rpm
//! install, generated from the command line's own clap definition (clap_mangen, clap_complete), so that
//! they say what `--help` says. scripts/build/package runs it; nothing else needs it.
//!
//! DIR must not exist: everything is written into a fresh directory beside it, which is renamed into place
//! once complete, so a failed run leaves no half-written tree.

use std::io::Write as _;
use std::path::Path;

use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::cli::{Cli, PackageFilesArgs};

/// The shells, each with the file name its completion directory expects.
const SHELLS: [(Shell, &str); 3] = [(Shell::Bash, "efatop"), (Shell::Zsh, "_efatop"), (Shell::Fish, "efatop.fish")];

pub fn package_files(args: &PackageFilesArgs) -> i32 {
    if args.out.symlink_metadata().is_ok() {
        eprintln!("efatop: error: --out {}: already exists (give a directory to create)", args.out.display());
        return 2;
    }
    match write_tree(&args.out) {
        Ok(pages) => {
            println!("efatop: wrote {pages} man pages and {} completion files into {}", SHELLS.len(), args.out.display());
            0
        }
        Err(err) => {
            eprintln!("efatop: error: --out {}: {err}", args.out.display());
            1
        }
    }
}

/// Writes the tree into a temporary directory beside `out`, then renames it to `out`. Returns the number
/// of man pages.
fn write_tree(out: &Path) -> std::io::Result<usize> {
    let parent = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let staging = tempfile::Builder::new().prefix(".efatop-package-files-").tempdir_in(parent)?;
    let man = staging.path().join("man");
    let completions = staging.path().join("completions");
    std::fs::create_dir(&man)?;
    std::fs::create_dir(&completions)?;

    // One page per visible command, subcommands named after their parents (`efatop-run-write.1`).
    clap_mangen::generate_to(Cli::command(), &man)?;
    let pages = std::fs::read_dir(&man)?.count();

    for (shell, name) in SHELLS {
        let mut buffer = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "efatop", &mut buffer);
        let mut file = std::fs::File::create_new(completions.join(name))?;
        file.write_all(&buffer)?;
        file.sync_all()?;
    }
    std::fs::rename(staging.keep(), out)?;
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_page_per_command_and_the_three_completions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("files");
        let code = package_files(&PackageFilesArgs { out: out.clone() });
        assert_eq!(code, 0);
        let page = std::fs::read_to_string(out.join("man/efatop.1")).expect("efatop.1");
        assert!(page.starts_with(".ie \\n(.g .ds Aq"), "not a roff page: {}", &page[..page.len().min(80)]);
        assert!(page.contains("topo"), "efatop.1 does not list the topo command");
        let run_write = std::fs::read_to_string(out.join("man/efatop-run-write.1")).expect("efatop-run-write.1");
        assert!(run_write.contains("provider"), "efatop-run-write.1 does not document --provider");
        // Hidden commands stay out of the pages.
        assert!(!out.join("man/efatop-package-files.1").exists());
        assert!(!out.join("man/efatop-bench-collector.1").exists());
        let bash = std::fs::read_to_string(out.join("completions/efatop")).expect("bash completion");
        assert!(bash.contains("complete -F _efatop"), "bash completion registers no function");
        let zsh = std::fs::read_to_string(out.join("completions/_efatop")).expect("zsh completion");
        assert!(zsh.starts_with("#compdef efatop"));
        let fish = std::fs::read_to_string(out.join("completions/efatop.fish")).expect("fish completion");
        assert!(fish.contains("complete -c efatop"));
        // Never over an existing directory: the flag is named, exit code 2, nothing written.
        assert_eq!(package_files(&PackageFilesArgs { out: out.clone() }), 2);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(".efatop-package-files-"))
            .collect();
        assert!(leftovers.is_empty(), "staging directories left behind: {leftovers:?}");
    }
}
