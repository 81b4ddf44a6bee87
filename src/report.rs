//! `efatop report` and `efatop compare`: saved runs rendered and compared (logic in `efatop-report`).

use clap::Args;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results file written by a run (`--out`, or ./efatop-results/)
    pub results: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline results file
    pub baseline: std::path::PathBuf,
    /// The results file to judge against the baseline
    pub candidate: std::path::PathBuf,
}

pub fn report(_args: &ReportArgs) -> i32 {
    eprintln!("efatop: error: report is not built yet");
    2
}

pub fn compare(_args: &CompareArgs) -> i32 {
    eprintln!("efatop: error: compare is not built yet");
    2
}
