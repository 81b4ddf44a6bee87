//! The two header lines: what runs where (experiment, provider, ranks and hosts, channels, memory,
//! link speed), then where the sweep is (configuration and size, a progress bar, elapsed time and ETA,
//! telemetry drops, and FROZEN while the view is frozen).

use efatop_proto::Experiment;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::text::{clock, plural, speed, width};
use crate::state::DashboardState;
use crate::view::View;

pub(super) const HEIGHT: u16 = 2;
const SEPARATOR: &str = " │ ";
/// Narrower than this, the progress bar is left out rather than drawn as a stub.
const MIN_BAR: usize = 6;
/// Which run-line item to shorten next (by index: experiment, provider, ranks, channels, memory,
/// link): host names go first, the experiment's name last.
const SHORTENING: [usize; 6] = [2, 3, 2, 4, 5, 0];

pub(super) fn render(state: &DashboardState, view: &View, area: Rect, buf: &mut Buffer) {
    let mut rows = area.rows();
    if let Some(row) = rows.next() {
        run_line(state, row.width).render(row, buf);
    }
    if let Some(row) = rows.next() {
        progress_line(state, view, row.width).render(row, buf);
    }
}

/// Distinct host names in rank order.
fn distinct_hosts(state: &DashboardState) -> Vec<&str> {
    // The fleet model keeps them, in that order, when it is built for these views: a 4096-host run's 32768
    // ranks are not hashed again every frame.
    if state.fleet.is_current(state) && !state.fleet.hosts().is_empty() {
        return state.fleet.hosts().iter().map(|host| host.name.as_str()).collect();
    }
    // A set, not a search of the list so far: a 1024-host run would compare names millions of times a frame.
    let mut seen = std::collections::HashSet::new();
    state.run.hosts.iter().map(String::as_str).filter(|host| seen.insert(*host)).collect()
}

fn run_line(state: &DashboardState, columns: u16) -> Line<'static> {
    let run = &state.run;
    let hosts = distinct_hosts(state);
    let experiment = if run.experiment == Experiment::Unknown { "starting" } else { run.experiment.name() };
    let ipc = run.experiment == Experiment::Ipc;
    let provider = if ipc {
        // ipc's bytes cross NVLink; its world's provider only carries the bootstrap.
        "CUDA IPC"
    } else if run.provider_stack.is_empty() {
        "provider ?"
    } else {
        run.provider_stack.as_str()
    };
    let (link_long, link_short) = match (ipc, run.link_gbps) {
        (true, Some(g)) => (format!("NVLink {:.0} GB/s peak", g / 8.0), format!("{:.0} GB/s", g / 8.0)),
        (true, None) => ("NVLink peak unknown".into(), "peak ?".into()),
        (false, Some(g)) => (format!("{} Gbps link", speed(g)), format!("{} Gbps", speed(g))),
        (false, None) => ("link speed unknown".into(), "link speed unknown".into()),
    };
    let host_count = plural(hosts.len(), "host", "hosts");
    // The names as far as a line could show them (a fleet's thousands are never all joined).
    let mut named = String::new();
    for host in &hosts {
        if named.len() > usize::from(columns) {
            break;
        }
        if !named.is_empty() {
            named.push_str(", ");
        }
        named.push_str(host);
    }
    let hosts_named = if hosts.is_empty() { host_count.clone() } else { format!("{host_count} ({named})") };
    // Each item from its longest form to its shortest.
    let forms: [Vec<String>; 6] = [
        vec![format!("efatop {experiment}"), experiment.to_string()],
        vec![provider.to_string()],
        vec![
            format!("{} on {hosts_named}", plural(run.ranks, "rank", "ranks")),
            format!("{} on {host_count}", plural(run.ranks, "rank", "ranks")),
            format!("{}r/{}h", run.ranks, hosts.len()),
        ],
        if ipc {
            vec!["1 pair of GPUs".into(), "1 pair".into()]
        } else {
            vec![plural(run.channels, "channel", "channels"), format!("{}ch", run.channels)]
        },
        vec![format!("{} memory", or_unknown(&run.memory)), or_unknown(&run.memory).to_string()],
        vec![link_long, link_short],
    ];
    // Shorten one item at a time, the least telling words first, until the line fits.
    let line_width = |levels: &[usize; 6]| {
        let items: usize = forms.iter().zip(levels).map(|(forms, &level)| width(&forms[level])).sum();
        items + width(SEPARATOR) * (forms.len() - 1)
    };
    let mut levels = [0; 6];
    for item in SHORTENING {
        if line_width(&levels) <= usize::from(columns) {
            break;
        }
        levels[item] = (levels[item] + 1).min(forms[item].len() - 1);
    }
    let items = forms.iter().zip(levels).map(|(forms, level)| forms[level].clone());
    let mut spans = Vec::new();
    for (index, item) in items.enumerate() {
        if index > 0 {
            spans.push(Span::styled(SEPARATOR, Style::new().fg(Color::DarkGray)));
        }
        let style = if index == 0 { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
        spans.push(Span::styled(item, style));
    }
    Line::from(spans)
}

fn or_unknown(text: &str) -> &str {
    if text.is_empty() { "?" } else { text }
}

fn progress_line(state: &DashboardState, view: &View, columns: u16) -> Line<'static> {
    let progress = &state.progress;
    let step = match (&progress.config, progress.size) {
        _ if state.finished => "finished".to_string(),
        (Some(config), Some(size)) => format!("{config} {}", efatop_proto::sizes::format_size(size)),
        (Some(config), None) => config.clone(),
        (None, Some(size)) => efatop_proto::sizes::format_size(size),
        (None, None) => "waiting".to_string(),
    };
    let eta = progress.eta.map_or_else(|| "-".to_string(), clock);
    let percent = format!("{:.0}%", progress.ratio() * 100.0);
    let full = vec![
        format!("{}/{} {percent}", progress.done, progress.total),
        format!("{} elapsed", clock(progress.elapsed)),
        format!("ETA {eta}"),
    ];
    let short = vec![percent, clock(progress.elapsed), format!("ETA {eta}")];

    let drops = Span::styled(
        format!("drops {}", state.drops_total),
        if state.drops_total > 0 { Style::new().fg(Color::Red).add_modifier(Modifier::BOLD) } else { Style::new() },
    );
    // Only shown once something was refused: a sample outside the run's world.
    let refused = (state.refused_total > 0)
        .then(|| Span::styled(format!("refused {}", state.refused_total), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)));
    let frozen = view
        .frozen
        .then(|| Span::styled("FROZEN", Style::new().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD)));
    let source = state.source.as_ref().map(|source| {
        let style = if source.alert { Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD) } else { Style::new().fg(Color::Cyan) };
        Span::styled(source.text.clone(), style)
    });
    let status = |timing: Vec<String>| -> Vec<Span<'static>> {
        let mut spans = Vec::new();
        for item in timing {
            spans.push(Span::raw(item));
            spans.push(Span::styled(SEPARATOR, Style::new().fg(Color::DarkGray)));
        }
        spans.push(drops.clone());
        if let Some(refused) = &refused {
            spans.push(Span::styled(SEPARATOR, Style::new().fg(Color::DarkGray)));
            spans.push(refused.clone());
        }
        if let Some(frozen) = &frozen {
            spans.push(Span::raw(" "));
            spans.push(frozen.clone());
        }
        if let Some(source) = &source {
            spans.push(Span::styled(SEPARATOR, Style::new().fg(Color::DarkGray)));
            spans.push(source.clone());
        }
        spans
    };
    let spans_width = |spans: &[Span]| spans.iter().map(Span::width).sum::<usize>();

    let columns = usize::from(columns);
    let step_span = Span::styled(step, Style::new().add_modifier(Modifier::BOLD));
    // Room for the bar is what the step label and the status leave over; the long status is used only
    // when a useful bar still fits beside it.
    for timing in [full, short] {
        let right = status(timing);
        let fixed = step_span.width() + 1 + 1 + spans_width(&right);
        if columns >= fixed + MIN_BAR {
            let mut spans = vec![step_span, Span::raw(" ")];
            spans.extend(bar(progress.ratio(), columns - fixed));
            spans.push(Span::raw(" "));
            spans.extend(right);
            return Line::from(spans);
        }
    }
    // Too narrow for a bar: the status alone, drops and FROZEN first so they are the last to be cut.
    let mut spans = vec![drops];
    if let Some(source) = source.filter(|source| source.style.fg == Some(Color::Yellow)) {
        spans.push(Span::raw(" "));
        spans.push(source);
    }
    if let Some(frozen) = frozen {
        spans.push(Span::raw(" "));
        spans.push(frozen);
    }
    spans.push(Span::raw(" "));
    spans.push(step_span);
    spans.push(Span::raw(format!(" {:.0}%", progress.ratio() * 100.0)));
    Line::from(spans)
}

/// A bar of `columns` cells, `ratio` of them filled.
pub(super) fn bar(ratio: f64, columns: usize) -> [Span<'static>; 2] {
    let ratio = if ratio.is_finite() { ratio.clamp(0.0, 1.0) } else { 0.0 };
    let filled = ((columns as f64) * ratio).round() as usize;
    [
        Span::styled("━".repeat(filled), Style::new().fg(Color::Green)),
        Span::styled("─".repeat(columns - filled.min(columns)), Style::new().fg(Color::DarkGray)),
    ]
}
