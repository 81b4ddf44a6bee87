//! `efatop report` and `efatop compare`: saved runs rendered and compared (logic in `efatop-report`).
//!
//! Exit codes: 0 done (compare: nothing regressed), 1 compare found a regression (with `--expected`: a
//! figure below expectation), 2 bad input or a file that cannot be read, parsed or written, or nothing to
//! compare (one line on stderr naming it).

use efatop_proto::expected;
use efatop_report::compare::compare_files;
use efatop_report::expected::against_expected;
use efatop_report::reference;
use efatop_report::{load, render, Format};

use crate::cli::{CompareArgs, ReportArgs};

pub fn report(args: &ReportArgs) -> i32 {
    let (results, notes) = match load(&args.results) {
        Ok(loaded) => (loaded.results, loaded.notes),
        Err(err) => return fail(&err),
    };
    let format: Format = args.format.into();
    // Table, Markdown and JSON carry the note among the run's notes; CSV has no place for it.
    if format == Format::Csv {
        for note in &notes {
            eprintln!("efatop: note: {}: {note}", args.results.display());
        }
    }
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
    print!("{}", render(&results, format));
    0
}

pub fn compare(args: &CompareArgs) -> i32 {
    if args.expected {
        return compare_expected(args);
    }
    let Some(candidate) = &args.candidate else {
        eprintln!("efatop: error: compare needs a baseline and a candidate results file, or one file with --expected");
        return 2;
    };
    if args.instance_type.is_some() {
        eprintln!("efatop: error: --instance-type picks the figures of --expected; add --expected and give one file");
        return 2;
    }
    match compare_files(
        &args.baseline,
        candidate,
        args.threshold.unwrap_or(DEFAULT_THRESHOLD_PERCENT),
        args.allow_different,
    ) {
        Ok(comparison) => {
            print!(
                "{}",
                comparison.render(
                    &args.baseline.display().to_string(),
                    &candidate.display().to_string()
                )
            );
            i32::from(comparison.regressed())
        }
        Err(err) => fail(&err),
    }
}

/// `--threshold` when not given: a drop of more than 5% between two runs.
const DEFAULT_THRESHOLD_PERCENT: f64 = 5.0;

/// `compare --expected RUN`: the run against its instance type's published figures (or `--instance-type`'s).
/// Exit codes as for two runs: 0 every figure at or above the floor, 1 some below, 2 bad input or nothing to
/// compare (one line naming the flag).
fn compare_expected(args: &CompareArgs) -> i32 {
    if args.candidate.is_some() {
        eprintln!("efatop: error: --expected judges one results file against published figures: give one file, not two");
        return 2;
    }
    if let Some(given) = args.instance_type.as_deref().filter(|t| !reference::is_listed(t)) {
        eprintln!("efatop: error: --instance-type {given}: efatop has no reference figures for it; use one of {}", reference::listed());
        return 2;
    }
    let (results, notes) = match load(&args.baseline) {
        Ok(loaded) => (loaded.results, loaded.notes),
        Err(err) => return fail(&err),
    };
    let name = args.baseline.display().to_string();
    let instance_type = match (args.instance_type.as_deref(), results.metadata.instance_type.as_deref()) {
        (Some(given), _) => given.to_string(),
        (None, Some(recorded)) if reference::is_listed(recorded) => recorded.to_string(),
        (None, Some(recorded)) => {
            eprintln!(
                "efatop: error: --expected: {name} ran on {recorded}, which efatop has no reference figures for; pass \
                 --instance-type, one of {}",
                reference::listed()
            );
            return 2;
        }
        (None, None) => {
            eprintln!(
                "efatop: error: --expected: {name} records no instance type (no DMI product name, or a file from before \
                 efatop recorded it); pass --instance-type, one of {}",
                reference::listed()
            );
            return 2;
        }
    };
    let threshold = args.threshold.unwrap_or(100.0 - expected::BELOW_PERCENT);
    match against_expected(&results, &instance_type, threshold) {
        Ok(mut against) => {
            against.notes = notes;
            print!("{}", against.render(&name));
            i32::from(against.below())
        }
        Err(why) => {
            eprintln!("efatop: error: --expected: {why}: nothing in {name} to compare ({})", reference::DOC);
            2
        }
    }
}

fn fail(err: &efatop_report::ReportError) -> i32 {
    eprintln!("efatop: error: {err}");
    2
}
