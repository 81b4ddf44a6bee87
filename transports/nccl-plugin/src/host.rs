//! What the process the plugin lives in can tell about itself: its effective user, the NCCL that loaded
//! the plugin, the CUDA device of the calling thread. Looked up with dlsym, so the plugin links neither.

use std::ffi::c_int;

/// This process's effective user id (a token file must be its own).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// NCCL's version as "2.28.3", where the process exports `ncclGetVersion` (libnccl is loaded: it loaded
/// us).
pub fn nccl_version() -> Option<String> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks a symbol up.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ncclGetVersion".as_ptr()) };
    if symbol.is_null() {
        return None;
    }
    let mut code: c_int = 0;
    // SAFETY: `ncclResult_t ncclGetVersion(int*)` is NCCL's stable API; it writes one int.
    let result = unsafe {
        let get: unsafe extern "C" fn(*mut c_int) -> c_int = std::mem::transmute(symbol);
        get(&mut code)
    };
    (result == 0 && code > 0).then(|| {
        // NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before.
        let code = code as u32;
        if code >= 20900 {
            format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
        } else {
            format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
        }
    })
}

/// The calling thread's CUDA device: CUDA's runtime's current device where the process exports
/// `cudaGetDevice` (a dynamically linked libcudart), else the device of the thread's current context from
/// the driver (`cuCtxGetDevice` in libcuda, which a statically linked libcudart, nvcc's default, loads).
/// Meaningful on a thread that set its device: NCCL's, in `init`.
pub fn cuda_device() -> Option<i32> {
    runtime_device().or_else(driver_device)
}

fn runtime_device() -> Option<i32> {
    // SAFETY: as in nccl_version.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cudaGetDevice".as_ptr()) };
    if symbol.is_null() {
        return None;
    }
    let mut device: c_int = -1;
    // SAFETY: `cudaError_t cudaGetDevice(int*)` writes one int; it is safe to call from any thread.
    let result = unsafe {
        let get: unsafe extern "C" fn(*mut c_int) -> c_int = std::mem::transmute(symbol);
        get(&mut device)
    };
    (result == 0 && device >= 0).then_some(device)
}

fn driver_device() -> Option<i32> {
    // SAFETY: RTLD_NOLOAD only hands back a library the process has loaded already (loading nothing, running
    // no initializer); the handle is closed below.
    let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: dlsym on a valid handle with a NUL-terminated name only looks a symbol up.
    let symbol = unsafe { libc::dlsym(handle, c"cuCtxGetDevice".as_ptr()) };
    let mut device: c_int = -1;
    let result = if symbol.is_null() {
        -1
    } else {
        // SAFETY: `CUresult cuCtxGetDevice(CUdevice*)` (CUdevice is an int) writes one int; without a current
        // context it returns an error and writes nothing.
        unsafe {
            let get: unsafe extern "C" fn(*mut c_int) -> c_int = std::mem::transmute(symbol);
            get(&mut device)
        }
    };
    // SAFETY: the handle dlopen gave above, closed once; libcuda stays loaded (the process holds it).
    unsafe { libc::dlclose(handle) };
    (result == 0 && device >= 0).then_some(device)
}
