//! This crate's test binaries load the libfabric whose headers they were built with. With
//! `LIBFABRIC_DIR=<prefix>` cargo gives test binaries no rpath: without `LD_LIBRARY_PATH=<prefix>/lib` they
//! would load the system's libfabric (Debian's 1.17) and test that instead.

#[test]
fn the_loaded_libfabric_is_the_one_built_against() {
    let (runtime, headers) = (efatop_fabric::runtime_version(), efatop_fabric::header_version());
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let loaded = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.rsplit('/').next().is_some_and(|name| name.starts_with("libfabric.so")))
        .expect("libfabric is mapped");
    assert_eq!(runtime, headers, "built against {headers} headers, loaded {loaded} ({runtime}); set LD_LIBRARY_PATH");
    if let Some(prefix) = option_env!("LIBFABRIC_DIR") {
        let prefix = std::path::Path::new(prefix).canonicalize().expect("LIBFABRIC_DIR");
        let loaded = std::path::Path::new(loaded).canonicalize().expect("loaded");
        assert!(loaded.starts_with(&prefix), "loaded {} instead of the libfabric under {}", loaded.display(), prefix.display());
    }
}
