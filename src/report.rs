//! `efatop report` and `efatop compare`: saved runs rendered and compared (logic in `efatop-report`).
//!
//! Exit codes: 0 done (compare: nothing regressed), 1 compare found a regression, 2 bad input or a file
//! that cannot be read, parsed or written (one line on stderr naming it).

use efatop_report::compare::compare_files;
use efatop_report::{load_results, render};

use crate::cli::{CompareArgs, ReportArgs};

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
