//! With `LIBFABRIC_DIR` (e.g. /opt/amazon/efa), the binary should load that libfabric at run time, not
//! whichever `libfabric.so.1` the loader finds first: record the library directory as an rpath, in the
//! binary and in this package's integration-test binaries (tests/libfabric.rs checks they load it; the
//! other crates' test binaries need `LD_LIBRARY_PATH=<prefix>/lib`, which .ci/run sets).
fn main() {
    println!("cargo:rerun-if-env-changed=LIBFABRIC_DIR");
    if let Ok(prefix) = std::env::var("LIBFABRIC_DIR") {
        for lib in ["lib64", "lib"] {
            let dir = std::path::Path::new(&prefix).join(lib);
            if dir.join("libfabric.so").exists() {
                println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{}", dir.display());
                println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", dir.display());
            }
        }
    }
}
