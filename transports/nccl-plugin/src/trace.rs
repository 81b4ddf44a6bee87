//! `EFATOP_PROFILER_TRACE=PATH`: every record the plugin took, one line each, so a real NCCL run becomes a
//! fixture the harness plays back through any ABI ([`crate::ffi::player`]).
//!
//! ```text
//! efatop-nccl-trace 1
//! # nccl 2.28.3 abi 6 host ip-10-0-0-1 pid 4242            (comments: '#' lines; "synthetic" marks made-up ones)
//! I <t_us> <ctx> <comm hex> <rank> <nranks> <nnodes> <name or ->           communicator init
//! F <t_us> <ctx>                                                           finalize
//! S <t_us> <id> <ctx> <parent> <rank> <kind> <fields...>                   startEvent
//!     group
//!     coll <seq> <func> <count> <datatype> <root> <channels> <warps> <algo> <proto> <group> [<tag> <variant> <sym 0|1>]
//!     p2p <func> <count> <datatype> <peer> <channels> <group> [<tag>]       (v7's fields: written when set)
//!     proxyop <channel> <peer> <steps> <chunk> <send 0|1>
//!     proxystep <step>
//!     kernelch <channel> <ptimer ns>
//!     kernelphase <channel> <phase 0|1|2> <ptimer ns>                      (v7)
//!     collapi <func> <count> <datatype> <root>
//!     p2papi <func> <count> <datatype>
//!     groupapi <depth>
//!     kernellaunch
//!     other <type>
//! R <t_us> <id> <state> <arg>                                              recordEventState
//! E <t_us> <id>                                                            stopEvent
//! D <dropped so far>                                                       the ring dropped records
//! ```
//! Ids and parents are the plugin's handles (0: none); times are µs since the plugin started.

use std::fmt::Write as _;

use crate::record::{Event, Name, Record};

pub const HEADER: &str = "efatop-nccl-trace 1";

fn n(name: &Name) -> &str {
    match name.as_str() {
        "" => "-",
        s => s,
    }
}

/// One record as its line (with the newline).
pub fn line(record: &Record, out: &mut String) {
    let _ = match record {
        Record::Start { t_ns, id, ctx, parent, rank, event } => {
            let _ = write!(out, "S {} {id} {ctx} {parent} {rank} ", t_ns / 1000);
            match event {
                Event::Group => writeln!(out, "group"),
                Event::Coll { seq, func, count, datatype, root, channels, warps, algo, proto, group, tag, variant, sym } => {
                    let _ = write!(out, "coll {seq} {} {count} {} {root} {channels} {warps} {} {} {group}", n(func), n(datatype), n(algo), n(proto));
                    if *tag != 0 || !variant.as_str().is_empty() || *sym {
                        let _ = write!(out, " {tag} {} {}", n(variant), u8::from(*sym));
                    }
                    writeln!(out)
                }
                Event::P2p { func, count, datatype, peer, channels, group, tag } => {
                    let _ = write!(out, "p2p {} {count} {} {peer} {channels} {group}", n(func), n(datatype));
                    if *tag != 0 {
                        let _ = write!(out, " {tag}");
                    }
                    writeln!(out)
                }
                Event::ProxyOp { channel, peer, steps, chunk, send } => writeln!(out, "proxyop {channel} {peer} {steps} {chunk} {}", u8::from(*send)),
                Event::ProxyStep { step } => writeln!(out, "proxystep {step}"),
                Event::KernelCh { channel, ptimer } => writeln!(out, "kernelch {channel} {ptimer}"),
                Event::KernelPhase { channel, phase, ptimer } => writeln!(out, "kernelphase {channel} {phase} {ptimer}"),
                Event::CollApi { func, count, datatype, root } => writeln!(out, "collapi {} {count} {} {root}", n(func), n(datatype)),
                Event::P2pApi { func, count, datatype } => writeln!(out, "p2papi {} {count} {}", n(func), n(datatype)),
                Event::GroupApi { depth } => writeln!(out, "groupapi {depth}"),
                Event::KernelLaunch => writeln!(out, "kernellaunch"),
                Event::Other { kind } => writeln!(out, "other {kind}"),
            }
        }
        Record::State { t_ns, id, state, arg } => writeln!(out, "R {} {id} {state} {arg}", t_ns / 1000),
        Record::OpSteps { t_ns, id, bytes, steps, handed_ns, peer_waits } => writeln!(out, "O {} {id} {bytes} {steps} {handed_ns} {}", t_ns / 1000, u8::from(*peer_waits)),
        Record::Stop { t_ns, id } => writeln!(out, "E {} {id}", t_ns / 1000),
    };
}

/// One line of a trace, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Init { t_us: u64, ctx: u32, comm: u64, rank: i32, nranks: i32, nnodes: i32, name: Option<String> },
    Finalize { t_us: u64, ctx: u32 },
    Record(Record),
    Dropped(u64),
}

/// A trace's header facts and lines.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub nccl_version: Option<String>,
    pub abi: Option<u32>,
    pub synthetic: bool,
    pub lines: Vec<Line>,
}

fn name_of(text: &str) -> Name {
    Name::new(if text == "-" { b"" } else { text.as_bytes() })
}

/// Parses a trace; the error names the line.
pub fn parse(text: &str) -> Result<Trace, String> {
    let mut trace = Trace::default();
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, first)) if first.trim() == HEADER => {}
        _ => return Err(format!("not a trace: its first line is not '{HEADER}'")),
    }
    for (index, line) in lines {
        let bad = |what: &str| format!("line {}: {what}: {line}", index + 1);
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Result<u64, String> { f.get(i).and_then(|t| t.parse::<u64>().ok()).ok_or_else(|| bad("a number expected")) };
        let int = |i: usize| -> Result<i64, String> { f.get(i).and_then(|t| t.parse::<i64>().ok()).ok_or_else(|| bad("an integer expected")) };
        let word = |i: usize| -> Result<&str, String> { f.get(i).copied().ok_or_else(|| bad("a field is missing")) };
        match f.first().copied() {
            None => {}
            Some("#") => {
                let words = &f[1..];
                for pair in words.windows(2) {
                    match pair[0] {
                        "nccl" => trace.nccl_version = Some(pair[1].to_string()),
                        "abi" => trace.abi = pair[1].parse().ok(),
                        _ => {}
                    }
                }
                if words.contains(&"synthetic") {
                    trace.synthetic = true;
                }
            }
            Some("I") => trace.lines.push(Line::Init {
                t_us: num(1)?,
                ctx: num(2)? as u32,
                comm: u64::from_str_radix(word(3)?, 16).map_err(|_| bad("a hex id expected"))?,
                rank: int(4)? as i32,
                nranks: int(5)? as i32,
                nnodes: int(6)? as i32,
                name: f.get(7).filter(|n| **n != "-").map(|n| (*n).to_string()),
            }),
            Some("F") => trace.lines.push(Line::Finalize { t_us: num(1)?, ctx: num(2)? as u32 }),
            Some("D") => trace.lines.push(Line::Dropped(num(1)?)),
            Some("E") => trace.lines.push(Line::Record(Record::Stop { t_ns: num(1)? * 1000, id: num(2)? })),
            Some("O") => trace.lines.push(Line::Record(Record::OpSteps {
                t_ns: num(1)? * 1000,
                id: num(2)?,
                bytes: num(3)?,
                steps: num(4)?,
                handed_ns: num(5)?,
                peer_waits: num(6)? != 0,
            })),
            Some("R") => trace.lines.push(Line::Record(Record::State { t_ns: num(1)? * 1000, id: num(2)?, state: int(3)? as i32, arg: num(4)? })),
            Some("S") => {
                let event = match word(6)? {
                    "group" => Event::Group,
                    "coll" => Event::Coll {
                        seq: num(7)?,
                        func: name_of(word(8)?),
                        count: num(9)?,
                        datatype: name_of(word(10)?),
                        root: int(11)? as i32,
                        channels: num(12)? as u8,
                        warps: num(13)? as u8,
                        algo: name_of(word(14)?),
                        proto: name_of(word(15)?),
                        group: num(16)?,
                        tag: if f.len() > 17 { num(17)? } else { 0 },
                        variant: if f.len() > 18 { name_of(word(18)?) } else { Name::default() },
                        sym: f.len() > 19 && num(19)? != 0,
                    },
                    "p2p" => Event::P2p {
                        func: name_of(word(7)?),
                        count: num(8)?,
                        datatype: name_of(word(9)?),
                        peer: int(10)? as i32,
                        channels: num(11)? as u8,
                        group: num(12)?,
                        tag: if f.len() > 13 { num(13)? } else { 0 },
                    },
                    "proxyop" => Event::ProxyOp { channel: num(7)? as u8, peer: int(8)? as i32, steps: int(9)? as i32, chunk: int(10)? as i32, send: num(11)? != 0 },
                    "proxystep" => Event::ProxyStep { step: int(7)? as i32 },
                    "kernelch" => Event::KernelCh { channel: num(7)? as u8, ptimer: num(8)? },
                    "kernelphase" => Event::KernelPhase { channel: num(7)? as u8, phase: num(8)? as u8, ptimer: num(9)? },
                    "collapi" => Event::CollApi { func: name_of(word(7)?), count: num(8)?, datatype: name_of(word(9)?), root: int(10)? as i32 },
                    "p2papi" => Event::P2pApi { func: name_of(word(7)?), count: num(8)?, datatype: name_of(word(9)?) },
                    "groupapi" => Event::GroupApi { depth: int(7)? as i32 },
                    "kernellaunch" => Event::KernelLaunch,
                    "other" => Event::Other { kind: num(7)? },
                    _ => return Err(bad("an unknown event kind")),
                };
                trace.lines.push(Line::Record(Record::Start { t_ns: num(1)? * 1000, id: num(2)?, ctx: num(3)? as u32, parent: num(4)?, rank: int(5)? as i32, event }));
            }
            Some(_) => return Err(bad("an unknown line")),
        }
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_reads_back_as_written() {
        let records = [
            Record::Start { t_ns: 5000, id: 3, ctx: 0, parent: 2, rank: 1, event: Event::Coll { seq: 4, func: Name::new(b"AllReduce"), count: 262_144, datatype: Name::new(b"ncclFloat32"), root: 0, channels: 2, warps: 16, algo: Name::new(b"RING"), proto: Name::new(b"SIMPLE"), group: 1, tag: 0, variant: Name::default(), sym: false } },
            Record::Start { t_ns: 9000, id: 6, ctx: 0, parent: 2, rank: 1, event: Event::Coll { seq: 5, func: Name::new(b"AllReduce"), count: 8, datatype: Name::new(b"ncclBfloat16"), root: 0, channels: 1, warps: 16, algo: Name::new(b"RING"), proto: Name::new(b"LL"), group: 1, tag: 42, variant: Name::new(b"AGxLLMC_R"), sym: true } },
            Record::Start { t_ns: 10000, id: 7, ctx: 0, parent: 6, rank: 1, event: Event::P2p { func: Name::new(b"Send"), count: 8, datatype: Name::new(b"ncclInt8"), peer: 0, channels: 1, group: 1, tag: 9 } },
            Record::Start { t_ns: 11000, id: 8, ctx: 0, parent: 7, rank: 1, event: Event::KernelPhase { channel: 3, phase: 2, ptimer: 123_456_789 } },
            Record::Start { t_ns: 6000, id: 4, ctx: 0, parent: 3, rank: 1, event: Event::ProxyOp { channel: 1, peer: 0, steps: 8, chunk: 524_288, send: true } },
            Record::State { t_ns: 7000, id: 5, state: 9, arg: 65536 },
            Record::OpSteps { t_ns: 7000, id: 4, bytes: 1 << 20, steps: 16, handed_ns: 7_400_123, peer_waits: true },
            Record::Stop { t_ns: 8000, id: 5 },
        ];
        let mut text = format!("{HEADER}\n# nccl 2.28.3 abi 5 synthetic\n");
        for r in &records {
            line(r, &mut text);
        }
        let trace = parse(&text).expect("parses");
        assert_eq!(trace.nccl_version.as_deref(), Some("2.28.3"));
        assert_eq!(trace.abi, Some(5));
        assert!(trace.synthetic);
        let back: Vec<Record> = trace.lines.iter().filter_map(|l| if let Line::Record(r) = l { Some(*r) } else { None }).collect();
        assert_eq!(back, records);
        assert!(parse("S 1 2").is_err());
    }
}
