//! The test binaries and the efatop they start load the libfabric they were built against: with
//! `LIBFABRIC_DIR=<prefix>` (say libfabric 2.6.0 built by scripts/build/build-libfabric) that prefix's library, not
//! the system's 1.17 that the loader would find first (cargo gives test binaries no rpath of their own).

mod common;

use common::{built_libfabric_lib_dir, efatop, serial};

/// The `libfabric.so` this process mapped, from /proc/self/maps.
fn loaded_libfabric() -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.rsplit('/').next().is_some_and(|name| name.starts_with("libfabric.so")))
        .map(std::path::PathBuf::from)
}

#[test]
fn this_test_binary_runs_on_the_libfabric_it_was_built_against() {
    let (runtime, headers) = (efatop_fabric::runtime_version(), efatop_fabric::header_version());
    let loaded = loaded_libfabric().expect("libfabric is mapped");
    if let Some(dir) = built_libfabric_lib_dir() {
        assert_eq!(
            runtime, headers,
            "built against the libfabric {headers} headers of {}, but this test binary loaded {} ({runtime}): \
             run the tests with LD_LIBRARY_PATH={}",
            dir.display(),
            loaded.display(),
            dir.display()
        );
        let dir = dir.canonicalize().expect("lib dir");
        let loaded = loaded.canonicalize().expect("loaded path");
        assert!(loaded.starts_with(&dir), "loaded {} instead of the library under {}", loaded.display(), dir.display());
    } else {
        // pkg-config's libfabric (Debian's 1.17): the loader's default one, which is the same install.
        assert_eq!(runtime, headers, "built against {headers} headers via pkg-config but loaded {} ({runtime})", loaded.display());
    }
}

#[test]
fn the_results_file_records_the_libfabric_efatop_ran_on() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("results.json");
    let run = efatop(&[
        "run", "--ranks", "2", "write", "--provider", "shm", "--min-size", "4K", "--max-size", "4K", "--iters", "2",
        "--warmup", "1", "--configs", "single", "--no-tui", "--out", out.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("json");
    assert_eq!(
        results["metadata"]["libfabric_version"].as_str(),
        Some(efatop_fabric::header_version().as_str()),
        "efatop ran on another libfabric than the headers it was built with\n{}",
        run.stderr
    );
    assert!(!run.stderr.contains("is older than the"), "no version warning: {}", run.stderr);
}
