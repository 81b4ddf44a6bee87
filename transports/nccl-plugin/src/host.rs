//! What the process the plugin lives in can tell about itself: its effective user, the NCCL that loaded
//! the plugin, the CUDA device of the calling thread; and who holds the other end of a local socket. Looked up with dlsym, so the plugin links neither.

use std::ffi::c_int;

/// This process's effective user id (a token file must be its own).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The lowest priority a thread may give itself (nice 19), for the calling thread and the threads it starts
/// after (Linux keeps a nice value per thread, and a new thread takes its creator's). False when the kernel
/// refused (a thread may always lower its own).
pub fn lowest_priority() -> bool {
    // SAFETY: gettid and setpriority take and return plain integers; PRIO_PROCESS with a thread id sets that
    // one thread's nice value.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) == 0 }
}

/// The process at the other end of a connected Unix socket: its pid and effective user id, as the kernel
/// recorded them when it connected or listened (`SO_PEERCRED`); `None` where the kernel does not say.
pub fn peer(socket: &impl std::os::fd::AsRawFd) -> Option<(u32, u32)> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes (one ucred) into `cred`, which lives across the call;
    // the descriptor is borrowed from a live socket.
    let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, std::ptr::addr_of_mut!(cred).cast(), &mut len) };
    (rc == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some((cred.pid as u32, cred.uid))
}

/// Writes to a Unix socket without SIGPIPE: std writes a `UnixStream` with write(2), which raises SIGPIPE
/// when the peer is gone, and a plugin lives in a process (NCCL's, Python's) that may not ignore it; this
/// says `MSG_NOSIGNAL`, as std's TCP writes do. The socket's send timeout holds as for write(2).
pub struct NoSigpipe<'a>(pub &'a std::os::unix::net::UnixStream);

impl std::io::Write for NoSigpipe<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        // SAFETY: send reads at most `buf.len()` bytes from `buf`, which outlives the call; the descriptor
        // is borrowed from a live socket.
        let sent = unsafe { libc::send(self.0.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if sent < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The relay's handshake, bounded by one deadline (`auth::deadline`), writes without SIGPIPE too.
impl efatop_auth::deadline::Timed for NoSigpipe<'_> {
    fn set_read_timeout(&self, limit: Option<std::time::Duration>) -> std::io::Result<()> {
        self.0.set_read_timeout(limit)
    }

    fn set_write_timeout(&self, limit: Option<std::time::Duration>) -> std::io::Result<()> {
        self.0.set_write_timeout(limit)
    }

    fn read_some(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        std::io::Read::read(&mut self.0, buffer)
    }

    fn write_some(&mut self, buffer: &[u8]) -> std::io::Result<usize> {
        std::io::Write::write(self, buffer)
    }
}

/// NCCL's version as "2.28.3": `ncclGetVersion` of the NCCL that loaded the plugin. Looked up in the
/// process's global scope first (a program linked with libnccl), then in every object the process has
/// loaded: a library loaded with `RTLD_LOCAL` keeps its symbols out of the global scope, and PyTorch loads
/// its NCCL so (as a dependency of its CUDA library, under Python's default local `dlopen`), which left
/// every rank of a PyTorch job without a version before this second look.
pub fn nccl_version() -> Option<String> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks a symbol up.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ncclGetVersion".as_ptr()) };
    let code = if symbol.is_null() { loaded_objects().iter().find_map(|path| version_in(path)) } else { call_get_version(symbol) };
    code.map(version_text)
}

/// `NCCL_VERSION(X,Y,Z)`: X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before.
pub fn version_text(code: u32) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

fn call_get_version(symbol: *mut std::ffi::c_void) -> Option<u32> {
    let mut code: c_int = 0;
    // SAFETY: `ncclResult_t ncclGetVersion(int*)` is NCCL's stable API; it writes one int.
    let result = unsafe {
        let get: unsafe extern "C" fn(*mut c_int) -> c_int = std::mem::transmute(symbol);
        get(&mut code)
    };
    (result == 0 && code > 0).then_some(code as u32)
}

/// `ncclGetVersion` of the already loaded object at `path`, if it has one.
fn version_in(path: &std::ffi::CStr) -> Option<u32> {
    // SAFETY: RTLD_NOLOAD hands back an object the process has loaded already (loading nothing, running no
    // initializer), or null; the handle is closed below.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: dlsym on a valid handle with a NUL-terminated name only looks a symbol up.
    let symbol = unsafe { libc::dlsym(handle, c"ncclGetVersion".as_ptr()) };
    let code = if symbol.is_null() { None } else { call_get_version(symbol) };
    // SAFETY: the handle dlopen gave above, closed once; the object stays loaded (the process holds it).
    unsafe { libc::dlclose(handle) };
    code
}

/// The paths of the objects the process has loaded, those named like NCCL's library first.
fn loaded_objects() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut std::ffi::c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the call and our own Vec as `data`; a name is
        // a NUL-terminated string or null.
        unsafe {
            let out = &mut *data.cast::<Vec<std::ffi::CString>>();
            let name = (*info).dlpi_name;
            if !name.is_null() && *name != 0 && out.len() < 4096 {
                out.push(std::ffi::CStr::from_ptr(name).to_owned());
            }
        }
        0
    }
    let mut out: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: the callback only reads the info it is given and pushes into `out`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::addr_of_mut!(out).cast()) };
    out.sort_by_key(|p| !p.to_string_lossy().contains("libnccl"));
    out
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

/// CUDA's PCI address of `device` (`00000000:53:00.0`), from the runtime NCCL loaded
/// (`cudaDeviceGetPCIBusId`), else the driver (`cuDeviceGetPCIBusId`; a driver device handle is its
/// ordinal among the visible devices).
pub fn cuda_pci_bus_id(device: i32) -> Option<String> {
    let mut text = [0 as std::ffi::c_char; 32];
    let call = |symbol: *mut std::ffi::c_void, text: &mut [std::ffi::c_char; 32]| -> bool {
        if symbol.is_null() {
            return false;
        }
        // SAFETY: `cudaError_t cudaDeviceGetPCIBusId(char*, int len, int device)` and `CUresult
        // cuDeviceGetPCIBusId(char*, int len, CUdevice)` write at most `len` bytes, NUL included.
        unsafe {
            let get: unsafe extern "C" fn(*mut std::ffi::c_char, c_int, c_int) -> c_int = std::mem::transmute(symbol);
            get(text.as_mut_ptr(), text.len() as c_int, device) == 0
        }
    };
    // SAFETY: as in nccl_version.
    let runtime = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cudaDeviceGetPCIBusId".as_ptr()) };
    let mut ok = call(runtime, &mut text);
    if !ok {
        // SAFETY: as in driver_device: RTLD_NOLOAD loads nothing; the handle is closed below.
        let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !handle.is_null() {
            // SAFETY: dlsym on a valid handle only looks a symbol up.
            let driver = unsafe { libc::dlsym(handle, c"cuDeviceGetPCIBusId".as_ptr()) };
            ok = call(driver, &mut text);
            // SAFETY: the handle dlopen gave above, closed once.
            unsafe { libc::dlclose(handle) };
        }
    }
    if !ok {
        return None;
    }
    let bytes: Vec<u8> = text.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8(bytes).ok().filter(|s| !s.is_empty())
}
