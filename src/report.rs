//! `efatop report` and `efatop compare`: saved runs rendered and compared (logic in `efatop-report`).
//!
//! Exit codes: 0 done (compare: nothing regressed), 1 compare found a regression, 2 bad input or a file
//! that cannot be read, parsed or written (one line on stderr naming it).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use efatop_report::compare::compare_files;
use efatop_report::{load_results, parse_threshold, render, Format};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// the header and seed-layout table a run prints
    Table,
    /// one row per configuration and size, every field
    Csv,
    /// metadata and one table per configuration
    Md,
    /// the results file, pretty-printed
    Json,
}

impl From<FormatArg> for Format {
    fn from(arg: FormatArg) -> Self {
        match arg {
            FormatArg::Table => Format::Table,
            FormatArg::Csv => Format::Csv,
            FormatArg::Md => Format::Markdown,
            FormatArg::Json => Format::Json,
        }
    }
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results file written by a run (`--out`, or ./efatop-results/)
    pub results: PathBuf,
    /// How to print the run
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
    /// Also draw bandwidth and latency against size (and all-to-all pair heatmaps) into this PNG; the data
    /// drawn goes to PATH.json beside it
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline results file
    pub baseline: PathBuf,
    /// The results file to judge against the baseline
    pub candidate: PathBuf,
    /// A drop in bandwidth, or a rise in p50 latency, beyond this percentage is a regression (exit code 1)
    #[arg(long, default_value = "5%", value_name = "PCT", value_parser = parse_threshold)]
    pub threshold: f64,
    /// Compare runs of different experiments (write against sendrecv, ...) instead of refusing
    #[arg(long)]
    pub allow_different: bool,
}

pub fn report(args: &ReportArgs) -> i32 {
    let results = match load_results(&args.results) {
        Ok(results) => results,
        Err(err) => return fail(&err),
    };
    if let Some(png) = &args.plot {
        if let Err(err) = efatop_report::plot(&results, png) {
            eprintln!("efatop: error: --plot: {err}");
            return 2;
        }
        eprintln!(
            "efatop: plot written to {} (data: {})",
            png.display(),
            efatop_report::sidecar_path(png).display()
        );
    }
    print!("{}", render(&results, args.format.into()));
    0
}

pub fn compare(args: &CompareArgs) -> i32 {
    match compare_files(
        &args.baseline,
        &args.candidate,
        args.threshold,
        args.allow_different,
    ) {
        Ok(comparison) => {
            print!(
                "{}",
                comparison.render(
                    &args.baseline.display().to_string(),
                    &args.candidate.display().to_string()
                )
            );
            i32::from(comparison.regressed())
        }
        Err(err) => fail(&err),
    }
}

fn fail(err: &efatop_report::ReportError) -> i32 {
    eprintln!("efatop: error: {err}");
    2
}
