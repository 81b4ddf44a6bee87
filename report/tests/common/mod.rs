//! Fixtures and golden files shared by the report tests. `EFATOP_BLESS=1 cargo test -p efatop-report`
//! rewrites the golden files after an intended change; review the diff.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use efatop_proto::RunResults;

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn load(name: &str) -> RunResults {
    efatop_report::load_results(&fixture(name)).unwrap_or_else(|e| panic!("{e}"))
}

pub fn golden(file: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("EFATOP_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (EFATOP_BLESS=1 writes it)", path.display()));
    if expected != actual {
        let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
        let at = (0..e.len().max(a.len()))
            .find(|&i| e.get(i) != a.get(i))
            .unwrap_or(0);
        panic!(
            "{file}, line {}:\n  golden: {:?}\n  actual: {:?}\nEFATOP_BLESS=1 rewrites the golden file",
            at + 1,
            e.get(at),
            a.get(at)
        );
    }
}

/// A directory of its own under the system temp dir, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("efatop-report-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
