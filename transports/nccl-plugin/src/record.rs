//! What the hot path pushes into the ring: fixed-size, `Copy` records, names copied inline (NCCL's names
//! are short literals: "AllReduce", "ncclFloat32", "RING", "SIMPLE"), so that nothing is allocated or
//! dereferenced after the call returns.

/// A name of at most 15 bytes, inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Name {
    len: u8,
    bytes: [u8; 15],
}

impl Name {
    /// The first 15 bytes of `bytes`.
    pub fn new(bytes: &[u8]) -> Self {
        let mut name = Self::default();
        let len = bytes.len().min(15);
        name.bytes[..len].copy_from_slice(&bytes[..len]);
        name.len = len as u8;
        name
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("?")
    }
}

/// An event's descriptor, as far as the fold needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Group,
    /// `tag`: v7's per-call `userTag` (0: untagged, and before v7); `variant`, `sym`: v7's kernel variant
    /// and whether it is a symmetric-memory kernel (empty, false before v7).
    Coll { seq: u64, func: Name, count: u64, datatype: Name, root: i32, channels: u8, warps: u8, algo: Name, proto: Name, group: u64, tag: u64, variant: Name, sym: bool },
    P2p { func: Name, count: u64, datatype: Name, peer: i32, channels: u8, group: u64, tag: u64 },
    ProxyOp { channel: u8, peer: i32, steps: i32, chunk: i32, send: bool },
    ProxyStep { step: i32 },
    KernelCh { channel: u8, ptimer: u64 },
    /// v7: a phase of a kernel channel (its parent): 0 initial sync, 1 compute, 2 final sync; its start on
    /// the GPU's timer.
    KernelPhase { channel: u8, phase: u8, ptimer: u64 },
    CollApi { func: Name, count: u64, datatype: Name, root: i32 },
    P2pApi { func: Name, count: u64, datatype: Name },
    GroupApi { depth: i32 },
    KernelLaunch,
    /// Any other type (proxy control, network plugin, copy-engine events): counted, not folded.
    Other { kind: u64 },
}

/// The bit a proxy step's id carries: the id is its operation's with this bit set (ids count up from 1 and
/// never reach it), so that a step needs no id of its own and its states name the operation. An id without
/// it on a step (traces from before) is the step's own.
pub const STEP_TAG: u64 = 1 << 62;

/// One call of the hot path. Ids are the handles this plugin gave NCCL (never 0); `parent` is NCCL's
/// `parentObj`, which is one of them or 0. Times are ns since the plugin started (the host's monotonic
/// clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    Start { t_ns: u64, id: u64, ctx: u32, parent: u64, rank: i32, event: Event },
    /// `arg`: a proxy step's `transSize`, a kernel channel's or phase's stop `pTimer`, else 0. `t_ns` is 0
    /// unless a trace is written (`Runtime::states_timed`).
    State { t_ns: u64, id: u64, state: i32, arg: u64 },
    /// What proxy operation `id`'s steps came to ([`crate::opsteps`]), pushed at its stop, just before its
    /// stop record, in place of a record of each step's states: the sizes their sized states carried and how
    /// many there were, a send's hand-over (`handed_ns`, 0 for none) and whether it was reported as v4's peer
    /// wait. Never in a trace (a trace keeps every step's record).
    OpSteps { t_ns: u64, id: u64, bytes: u64, steps: u64, handed_ns: u64, peer_waits: bool },
    Stop { t_ns: u64, id: u64 },
}

impl Record {
    /// When it happened (ns since the plugin started).
    pub fn t_ns(&self) -> u64 {
        match self {
            Record::Start { t_ns, .. } | Record::State { t_ns, .. } | Record::OpSteps { t_ns, .. } | Record::Stop { t_ns, .. } => *t_ns,
        }
    }
}
