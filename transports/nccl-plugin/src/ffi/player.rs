//! The trace player: loads a built plugin (`dlopen`) and plays a [`Trace`]'s records into it through one
//! ABI, as NCCL would call it (init, start/record/stop with the plugin's own handles as parents, finalize).
//! The CI harness drives it; each call's duration is measured, so a test can show the hot path never
//! waits.

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::abi::{self, DescrV4, DescrV5, DescrV6, DescrV7, ProfilerV4, ProfilerV5, ProfilerV6, ProfilerV7, StateArgs};
use crate::record::{Event, Name, Record};
use crate::trace::{Line, Trace};

/// A loaded plugin, through one ABI: its table's functions (`stopEvent`, `recordEventState` and `finalize`
/// have one signature in every version; `init` two; `startEvent` one per descriptor).
pub struct Plugin {
    _lib: libloading::Library,
    abi: u32,
    init: Init,
    start: Start,
    stop: abi::Stop,
    record: abi::Record,
    finalize: abi::Finalize,
    /// `efatop_profiler_playback_clock`: each record is stamped with its recorded time.
    clock: extern "C" fn(u64),
    /// Whether the plugin reads its own clock, as under NCCL, rather than the player stamping each record
    /// ([`Plugin::live_clock`]).
    live_clock: bool,
}

enum Init {
    /// v4's: the communicator's name before its id.
    V4(abi::InitV4),
    /// v5's to v7's.
    V5(abi::InitV5),
}

enum Start {
    V4(abi::StartV4),
    V5(abi::StartV5),
    V6(abi::StartV6),
    V7(abi::StartV7),
}

/// What a play did.
#[derive(Clone, Debug, Default)]
pub struct Played {
    pub calls: u64,
    /// The longest hot-path call (start, stop, record): the plugin's function alone, the player's own
    /// work (descriptors, names, handles) outside it.
    pub longest: Duration,
    /// Every hot-path call's duration, with the index of its line in the trace.
    pub hooks: Vec<(usize, Duration)>,
}

impl Plugin {
    /// Loads `path` and looks up `ncclProfiler_v<abi>` (4 to 7).
    pub fn load(path: &Path, abi: u32) -> Result<Self, String> {
        // SAFETY: loading the plugin runs no initialiser of ours beyond Rust's std (the plugin has no
        // constructors); it is the library built from this crate.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| format!("{}: {e}", path.display()))?;
        let symbol = format!("ncclProfiler_v{abi}");
        // SAFETY: the symbol is a static table of the type named by its version.
        let table: *const c_void = unsafe { lib.get::<*const c_void>(symbol.as_bytes()) }.map(|s| *s).map_err(|e| format!("{symbol}: {e}"))?;
        // SAFETY: the symbol is the plugin's `extern "C" fn(u64)` of that name (ffi.rs).
        let clock: extern "C" fn(u64) = unsafe { lib.get::<extern "C" fn(u64)>(b"efatop_profiler_playback_clock") }.map(|s| *s).map_err(|e| format!("efatop_profiler_playback_clock: {e}"))?;
        // SAFETY: `table` is the plugin's static table of the version its name says.
        let (init, start, stop, record, finalize) = unsafe {
            macro_rules! read {
                ($table:ty, $init:ident, $start:ident) => {{
                    let t = &*table.cast::<$table>();
                    (Init::$init(t.init), Start::$start(t.startEvent), t.stopEvent, t.recordEventState, t.finalize)
                }};
            }
            match abi {
                4 => read!(ProfilerV4, V4, V4),
                5 => read!(ProfilerV5, V5, V5),
                6 => read!(ProfilerV6, V5, V6),
                7 => read!(ProfilerV7, V5, V7),
                _ => return Err(format!("no profiler ABI v{abi}")),
            }
        };
        Ok(Self { _lib: lib, abi, init, start, stop, record, finalize, clock, live_clock: false })
    }

    /// The plugin reads its own clock at each hook, as under NCCL (what a hook costs includes it), and the
    /// player stamps nothing: the figures are the play's time, not the recording's.
    #[must_use]
    pub fn live_clock(mut self) -> Self {
        self.live_clock = true;
        self
    }

    /// The cost A/B's switches, for a bench: `efatop_profiler_idle(idle)` and `efatop_profiler_skip(skip)`.
    pub fn switch(&self, idle: bool, skip: c_int) -> Result<(), String> {
        // SAFETY: both symbols are the plugin's `extern "C" fn(c_int)` of those names (ffi.rs).
        let (set_idle, set_skip) = unsafe {
            let idle_fn = self._lib.get::<extern "C" fn(c_int)>(b"efatop_profiler_idle").map_err(|e| format!("efatop_profiler_idle: {e}"))?;
            let skip_fn = self._lib.get::<extern "C" fn(c_int)>(b"efatop_profiler_skip").map_err(|e| format!("efatop_profiler_skip: {e}"))?;
            (*idle_fn, *skip_fn)
        };
        set_idle(c_int::from(idle));
        set_skip(skip);
        Ok(())
    }

    /// Plays `trace`, pacing its records at `speed` times their recorded pace (gaps capped at `max_gap`).
    pub fn play(&self, trace: &Trace, speed: f64, max_gap: Duration) -> Result<Played, String> {
        let mut contexts: HashMap<u32, *mut c_void> = HashMap::new();
        let mut handles: HashMap<u64, *mut c_void> = HashMap::new();
        let mut played = Played::default();
        let mut last_t: Option<u64> = None;
        // Each record is played at its own time on one schedule (the trace's gaps, each cut to `max_gap`,
        // from when playing began), not after a sleep of its gap from the last call: a late wake-up (a busy
        // machine) then delays that one record, and does not add up along the records of one collective.
        let began_playing = Instant::now();
        let mut scheduled = Duration::ZERO;
        for (index, line) in trace.lines.iter().enumerate() {
            let t_us = match line {
                Line::Init { t_us, .. } | Line::Finalize { t_us, .. } => Some(*t_us),
                Line::Record(record) => Some(record.t_ns() / 1000),
                Line::Dropped(_) => None,
            };
            if let (Some(t), Some(prev)) = (t_us, last_t) {
                scheduled += Duration::from_micros(t.saturating_sub(prev)).div_f64(speed.max(1e-3)).min(max_gap);
                let due = began_playing + scheduled;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    if wait > Duration::from_micros(50) {
                        std::thread::sleep(wait);
                    }
                }
            }
            if let Some(t) = t_us {
                last_t = t_us;
                // The plugin stamps what it is given now with the recorded time (never 0: that is "live").
                if !self.live_clock {
                    (self.clock)(t.saturating_mul(1000).max(1));
                }
            }
            match line {
                Line::Init { ctx, comm, rank, nranks, nnodes, name, .. } => {
                    let name = CString::new(name.clone().unwrap_or_default()).unwrap_or_default();
                    let mut context: *mut c_void = std::ptr::null_mut();
                    let mut mask: c_int = 0;
                    // SAFETY: the tables hold the plugin's functions of the ABI's signature; the arguments
                    // live for the call.
                    let result = unsafe {
                        match self.init {
                            Init::V4(init) => init(&raw mut context, &raw mut mask, name.as_ptr(), *comm, *nnodes, *nranks, *rank, std::ptr::null()),
                            Init::V5(init) => init(&raw mut context, *comm, &raw mut mask, name.as_ptr(), *nnodes, *nranks, *rank, std::ptr::null()),
                        }
                    };
                    if result != abi::NCCL_SUCCESS || context.is_null() {
                        return Err(format!("init failed ({result})"));
                    }
                    contexts.insert(*ctx, context);
                }
                Line::Finalize { ctx, .. } => {
                    if let Some(context) = contexts.remove(ctx) {
                        // SAFETY: as for init; the context is the one init gave.
                        unsafe { (self.finalize)(context) };
                    }
                }
                Line::Record(record) => {
                    let took = self.call(record, &contexts, &mut handles)?;
                    played.longest = played.longest.max(took);
                    played.hooks.push((index, took));
                    played.calls += 1;
                }
                Line::Dropped(_) => {}
            }
        }
        Ok(played)
    }

    /// Plays one record; returns how long the plugin's function took.
    fn call(&self, record: &Record, contexts: &HashMap<u32, *mut c_void>, handles: &mut HashMap<u64, *mut c_void>) -> Result<Duration, String> {
        let handle_of = |id: &u64, handles: &HashMap<u64, *mut c_void>| handles.get(id).copied().unwrap_or(std::ptr::null_mut());
        match record {
            Record::Start { id, ctx, parent, rank, event, .. } => {
                let context = contexts.get(ctx).copied().ok_or_else(|| format!("event {id} of a communicator never initialised"))?;
                if self.abi < 7 && matches!(event, Event::KernelPhase { .. }) {
                    // NCCL's adapters for older plugins drop v7's kernel phases (its v6 table's startEvent
                    // hands back a null handle): the plugin never hears of them, nor of their stop.
                    handles.insert(*id, std::ptr::null_mut());
                    return Ok(Duration::ZERO);
                }
                let parent = handle_of(parent, handles);
                let strings = Strings::of(event);
                let mut handle: *mut c_void = std::ptr::null_mut();
                let began;
                // SAFETY: the descriptor is fully initialised for its type, its strings outlive the call,
                // and the table's function has the ABI's signature.
                unsafe {
                    match self.start {
                        Start::V4(start) => {
                            let mut d = descr_v4(event, parent, *rank, &strings, handles);
                            began = Instant::now();
                            start(context, &raw mut handle, &raw mut d)
                        }
                        Start::V5(start) => {
                            let mut d = descr_v5(event, parent, *rank, &strings, handles);
                            began = Instant::now();
                            start(context, &raw mut handle, &raw mut d)
                        }
                        Start::V6(start) => {
                            let mut d = descr_v6(event, parent, *rank, &strings, handles);
                            began = Instant::now();
                            start(context, &raw mut handle, &raw mut d)
                        }
                        Start::V7(start) => {
                            let mut d = descr_v7(event, parent, *rank, &strings, handles);
                            began = Instant::now();
                            start(context, &raw mut handle, &raw mut d)
                        }
                    }
                };
                let took = began.elapsed();
                handles.insert(*id, handle);
                Ok(took)
            }
            Record::State { id, state, arg, .. } => {
                // SAFETY: a zeroed union is valid; the member set is the one the state reads.
                let mut args: StateArgs = unsafe { std::mem::zeroed() };
                if *state == abi::STATE_KERNEL_CH_STOP || *state == abi::STATE_KERNEL_PHASE_STOP {
                    args.kernelCh = abi::KernelChArgs { pTimer: *arg };
                } else {
                    args.proxyStep = abi::StepArgs { transSize: *arg as usize };
                }
                let handle = handle_of(id, handles);
                let began = Instant::now();
                // SAFETY: the table's function has the ABI's signature; args lives for the call.
                unsafe { (self.record)(handle, *state, &raw mut args) };
                Ok(began.elapsed())
            }
            // Not a call of NCCL's (the plugin's own summary of an operation's steps): nothing to play.
            Record::OpSteps { .. } => Ok(Duration::ZERO),
            Record::Stop { id, .. } => {
                // NCCL keeps a stopped task's handle as its children's parent: so does the map.
                let handle = handle_of(id, handles);
                let began = Instant::now();
                // SAFETY: as above.
                unsafe { (self.stop)(handle) };
                Ok(began.elapsed())
            }
        }
    }
}

/// An event's names as C strings, alive while the call runs.
struct Strings {
    func: CString,
    datatype: CString,
    algo: CString,
    proto: CString,
    /// v7: a collective's kernel variant, or a kernel phase's name.
    variant: CString,
}

impl Strings {
    fn of(event: &Event) -> Self {
        let c = |n: &Name| CString::new(n.as_str()).unwrap_or_default();
        let none = Name::default();
        let (func, datatype, algo, proto) = match event {
            Event::Coll { func, datatype, algo, proto, .. } => (func, datatype, algo, proto),
            Event::P2p { func, datatype, .. } | Event::CollApi { func, datatype, .. } | Event::P2pApi { func, datatype, .. } => (func, datatype, &none, &none),
            _ => (&none, &none, &none, &none),
        };
        let variant = match event {
            Event::Coll { variant, .. } => c(variant),
            // NCCL's names of the phases (profiler_v7.h's comment on `phaseId`).
            Event::KernelPhase { phase, .. } => CString::new(["initial_sync", "compute", "final_sync"].get(usize::from(*phase)).copied().unwrap_or("")).unwrap_or_default(),
            _ => CString::default(),
        };
        Self { func: c(func), datatype: c(datatype), algo: c(algo), proto: c(proto), variant }
    }
}

fn type_of(event: &Event) -> u64 {
    match event {
        Event::Group => abi::PROFILE_GROUP,
        Event::Coll { .. } => abi::PROFILE_COLL,
        Event::P2p { .. } => abi::PROFILE_P2P,
        Event::ProxyOp { .. } => abi::PROFILE_PROXY_OP,
        Event::ProxyStep { .. } => abi::PROFILE_PROXY_STEP,
        Event::KernelCh { .. } => abi::PROFILE_KERNEL_CH,
        Event::KernelPhase { .. } => abi::PROFILE_KERNEL_PHASE,
        Event::CollApi { .. } => abi::PROFILE_COLL_API,
        Event::P2pApi { .. } => abi::PROFILE_P2P_API,
        Event::GroupApi { .. } => abi::PROFILE_GROUP_API,
        Event::KernelLaunch => abi::PROFILE_KERNEL_LAUNCH,
        Event::Other { kind } => *kind,
    }
}

/// A collective's member of descriptor type `$ty` (v4's fields, then the version's own `$field`s).
macro_rules! coll {
    ($ty:ident, $s:expr, $seq:expr, $count:expr, $root:expr, $channels:expr, $warps:expr $(, $field:ident: $value:expr)*) => {
        abi::$ty {
            seqNumber: $seq,
            func: $s.func.as_ptr(),
            sendBuff: std::ptr::null(),
            recvBuff: std::ptr::null_mut(),
            count: $count as usize,
            root: $root,
            datatype: $s.datatype.as_ptr(),
            nChannels: $channels,
            nWarps: $warps,
            algo: $s.algo.as_ptr(),
            proto: $s.proto.as_ptr(),
            $($field: $value,)*
        }
    };
}

/// A point-to-point call's member, likewise.
macro_rules! p2p {
    ($ty:ident, $s:expr, $count:expr, $peer:expr, $channels:expr $(, $field:ident: $value:expr)*) => {
        abi::$ty { func: $s.func.as_ptr(), buff: std::ptr::null_mut(), datatype: $s.datatype.as_ptr(), count: $count as usize, peer: $peer, nChannels: $channels, $($field: $value,)* }
    };
}

/// A zeroed descriptor of type `$descr` for `$event` (as NCCL starts from `= {0}`), the members every
/// version lays out alike (proxy operation and step, kernel channel) filled, then `$arms` for the rest.
macro_rules! descriptor {
    ($descr:ty, $event:expr, $parent:expr, $rank:expr, |$d:ident| { $($arms:tt)* }) => {{
        // SAFETY: all-zero is a valid descriptor (null pointers, zero numbers).
        let mut $d: $descr = unsafe { std::mem::zeroed() };
        $d.type_ = type_of($event) as _;
        $d.parentObj = $parent;
        $d.rank = $rank;
        match $event {
            Event::ProxyOp { channel, peer, steps, chunk, send } => {
                $d.u.proxyOp = abi::ProxyOp { pid: std::process::id() as i32, channelId: *channel, peer: *peer, nSteps: *steps, chunkSize: *chunk, isSend: i32::from(*send) };
            }
            Event::ProxyStep { step } => $d.u.proxyStep = abi::ProxyStep { step: *step },
            Event::KernelCh { channel, ptimer } => $d.u.kernelCh = abi::KernelCh { channelId: *channel, pTimer: *ptimer },
            $($arms)*
        }
        $d
    }};
}

/// v5's descriptor (v6's has v5's members at v5's offsets: [`descr_v6`]).
macro_rules! descr_v5_layout {
    ($name:ident, $descr:ty) => {
        fn $name(event: &Event, parent: *mut c_void, rank: i32, s: &Strings, handles: &HashMap<u64, *mut c_void>) -> $descr {
            let group = |g: &u64| handles.get(g).copied().unwrap_or(std::ptr::null_mut());
            descriptor!($descr, event, parent, rank, |d| {
                Event::Coll { seq, count, root, channels, warps, group: g, .. } => d.u.coll = coll!(CollV5, s, *seq, *count, *root, *channels, *warps, parentGroup: group(g)),
                Event::P2p { count, peer, channels, group: g, .. } => d.u.p2p = p2p!(P2pV5, s, *count, *peer, *channels, parentGroup: group(g)),
                Event::CollApi { count, root, .. } => {
                    d.u.collApi = abi::CollApi { func: s.func.as_ptr(), count: *count as usize, datatype: s.datatype.as_ptr(), root: *root, stream: std::ptr::null_mut(), graphCaptured: false };
                }
                Event::P2pApi { count, .. } => {
                    d.u.p2pApi = abi::P2pApi { func: s.func.as_ptr(), count: *count as usize, datatype: s.datatype.as_ptr(), stream: std::ptr::null_mut(), graphCaptured: false };
                }
                Event::GroupApi { depth } => d.u.groupApi = abi::GroupApi { graphCaptured: false, groupDepth: *depth },
                Event::Group | Event::KernelLaunch | Event::KernelPhase { .. } | Event::Other { .. } => {}
            })
        }
    };
}
descr_v5_layout!(descr_v5, DescrV5);
descr_v5_layout!(descr_v6, DescrV6);

/// v7's descriptor, every member in v7's own layout (tags last in the members that grew).
fn descr_v7(event: &Event, parent: *mut c_void, rank: i32, s: &Strings, handles: &HashMap<u64, *mut c_void>) -> DescrV7 {
    let group = |g: &u64| handles.get(g).copied().unwrap_or(std::ptr::null_mut());
    descriptor!(DescrV7, event, parent, rank, |d| {
        Event::Coll { seq, count, root, channels, warps, group: g, tag, sym, .. } => {
            d.u.coll = coll!(CollV7, s, *seq, *count, *root, *channels, *warps, parentGroup: group(g), kernelVariant: s.variant.as_ptr(), isSymColl: *sym, userTag: *tag);
        }
        Event::P2p { count, peer, channels, group: g, tag, .. } => d.u.p2p = p2p!(P2pV7, s, *count, *peer, *channels, parentGroup: group(g), userTag: *tag),
        Event::KernelPhase { channel, phase, ptimer } => d.u.kernelPhase = abi::KernelPhase { channelId: *channel, phaseId: *phase, phaseName: s.variant.as_ptr(), pTimer: *ptimer },
        Event::CollApi { count, root, .. } => {
            d.u.collApi = abi::CollApiV7 { func: s.func.as_ptr(), count: *count as usize, datatype: s.datatype.as_ptr(), root: *root, stream: std::ptr::null_mut(), graphCaptured: false, userTag: 0 };
        }
        Event::P2pApi { count, .. } => {
            d.u.p2pApi = abi::P2pApiV7 { func: s.func.as_ptr(), count: *count as usize, datatype: s.datatype.as_ptr(), stream: std::ptr::null_mut(), graphCaptured: false, userTag: 0 };
        }
        Event::GroupApi { depth } => d.u.groupApi = abi::GroupApi { graphCaptured: false, groupDepth: *depth },
        Event::Group | Event::KernelLaunch | Event::Other { .. } => {}
    })
}

/// v4 knows no API events: the player skips them (NCCL's v4 adapter does too) by sending them as types v4's
/// plugin ignores. A collective's and a point-to-point call's parent is their group.
fn descr_v4(event: &Event, parent: *mut c_void, rank: i32, s: &Strings, handles: &HashMap<u64, *mut c_void>) -> DescrV4 {
    let group = |g: &u64| handles.get(g).copied().unwrap_or(std::ptr::null_mut());
    descriptor!(DescrV4, event, parent, rank, |d| {
        Event::Coll { seq, count, root, channels, warps, group: g, .. } => {
            d.parentObj = group(g);
            d.u.coll = coll!(CollV4, s, *seq, *count, *root, *channels, *warps);
        }
        Event::P2p { count, peer, channels, group: g, .. } => {
            d.parentObj = group(g);
            d.u.p2p = p2p!(P2pV4, s, *count, *peer, *channels);
        }
        _ => {}
    })
}
