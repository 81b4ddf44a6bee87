//! Generates bindings from the libfabric headers installed on the build machine.
//!
//! Where libfabric comes from, in order: `LIBFABRIC_DIR` (an absolute prefix such as `/opt/amazon/efa`,
//! holding `include/` and `lib/` or `lib64/`), then pkg-config (`PKG_CONFIG_PATH` selects among installs).
//! Both 1.x (Debian's 1.17) and 2.x headers are supported. This only picks what is compiled and linked
//! against: at run time the loader picks `libfabric.so.1` (ld.so.conf, `LD_LIBRARY_PATH`), because the
//! rpath below is not passed on to crates that depend on this one.
//! libfabric implements most of its API as `static inline` functions in the headers (fi_writedata,
//! fi_cq_read, fi_mr_reg, ...); bindgen's `wrap_static_fns` emits a C file with one exported wrapper per
//! such function, which is compiled here into a small static shim.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBFABRIC_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=efatop_shim.h");
    println!("cargo:rerun-if-changed=efatop_shim.c");

    let include_dirs = locate_libfabric();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let shim_stem = out_dir.join("libfabric_static_inline_shim");

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*|efatop_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*|EFATOP_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&shim_stem)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for dir in &include_dirs {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    let bindings = builder.generate().expect("bindgen failed on the libfabric headers");
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("writing bindings.rs");

    let mut shim = cc::Build::new();
    // The generated wrappers, and efatop's own C for calls whose shape differs between 1.x and 2.x headers.
    shim.file(shim_stem.with_extension("c"))
        .file("efatop_shim.c")
        .include(env::current_dir().expect("cwd"))
        .warnings(false);
    for dir in &include_dirs {
        shim.include(dir);
    }
    shim.compile("efatop_libfabric_shim");
}

/// Returns the include directories of the chosen libfabric and tells cargo how to link it.
fn locate_libfabric() -> Vec<PathBuf> {
    if let Ok(prefix) = env::var("LIBFABRIC_DIR") {
        let prefix = PathBuf::from(prefix);
        let include = prefix.join("include");
        // Without this check a prefix lacking headers would silently fall back to /usr/include, giving
        // bindings for a different libfabric than the one named.
        assert!(
            include.join("rdma/fabric.h").exists(),
            "LIBFABRIC_DIR={} has no include/rdma/fabric.h (set an absolute prefix with the devel headers)",
            prefix.display()
        );
        let mut found = false;
        for lib in ["lib64", "lib"] {
            let dir = prefix.join(lib);
            if dir.join("libfabric.so").exists() || dir.join("libfabric.a").exists() {
                found = true;
                println!("cargo:rustc-link-search=native={}", dir.display());
                // Run-time lookup of the same library the bindings were generated from. Cargo applies
                // rustc-link-arg only to this package's own targets, not to efatop-fabric or the binary.
                println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
            }
        }
        if !found {
            // Fine for `cargo check` against headers alone; a real link would pick up the default one.
            println!(
                "cargo:warning=no libfabric.so/.a under {}/lib64 or lib: the linker will use its default search path",
                prefix.display()
            );
        }
        println!("cargo:rustc-link-lib=fabric");
        return vec![include];
    }
    match pkg_config::Config::new().atleast_version("1.14").probe("libfabric") {
        Ok(lib) => lib.include_paths,
        Err(err) => panic!(
            "libfabric not found: install libfabric-dev (Debian) or set LIBFABRIC_DIR=/opt/amazon/efa\n{err}"
        ),
    }
}
