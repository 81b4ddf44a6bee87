//! efatop: measures what a libfabric fabric (EFA on AWS p5, or shm/tcp anywhere) really delivers.
//!
//! This binary parses the command line, starts or joins the ranks (its own launcher or MPI), sets up the
//! world, runs one experiment and prints what rank 0 measured.

mod bootstrap;
mod cli;
mod launch;
mod output;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, Experiment};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(run) => launch::launch(&run),
        Command::Write(args) => output::rank_main(&Experiment::Write(args)),
        Command::Sendrecv(args) => output::rank_main(&Experiment::Sendrecv(args)),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
