//! `efatop sweep`'s decisions, apart from its traffic (the experiment that moves it is
//! `efatop_experiments::sweep`): [`plan`] makes the rounds (which rank meets which), [`verdict`] judges
//! their figures into a [`Verdict`](efatop_proto::sweep::Verdict), by [`rails`]' one rule of a NIC behind
//! its rail, which the monitor's rail check, the fleet view and `efatop watch`'s rail flags judge by too. Pure: no fabric, no I/O. What a round
//! and a verdict are on the wire (the results file, the JSON lines) is proto's [`efatop_proto::sweep`].
//!
//! The sweep itself (judging as rounds finish, to plan its retests), rank 0's dashboard (judging as rounds
//! come in), the report (judging a results file) and `check --traffic` (reading one back) all judge with
//! this crate, so that one rule names the same suspects everywhere.

#![forbid(unsafe_code)]

pub mod plan;
pub mod rails;
pub mod verdict;
