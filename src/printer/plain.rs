//! Plain output: the run's header before the first size, the table and where the results went at the end.

use std::io::Write;
use std::path::Path;

use efatop_experiments::results::{RunMetadata, RunResults};

use super::{Mode, jsonl};

/// The run's header, before its first size.
pub fn print_header(metadata: &RunMetadata, sizes: &[u64]) {
    print!("{}", efatop_ui::render_header(metadata, sizes));
    let _ = std::io::stdout().flush();
}

/// Rank 0's last word on stdout: the JSON summary, or the header and table.
pub fn print_final(mode: Mode, results: &RunResults, sizes: &[u64], verified: bool, file: Option<&Path>) {
    if mode == Mode::Json {
        jsonl::print_summary(results);
        return;
    }
    if mode == Mode::Dashboard {
        // The dashboard has left the alternate screen: leave the tables in the scrollback.
        print!("{}", efatop_ui::render_header(&results.metadata, sizes));
    }
    if !results.measurements.is_empty() {
        println!();
        print!("{}", efatop_ui::render_table(results));
        print!("{}", efatop_ui::counters::render_counters(results));
    }
    if verified {
        println!("# every size verified: all bytes received matched the sender's pattern");
    }
    if let Some(file) = file {
        println!("# results written to {}", file.display());
    }
}
