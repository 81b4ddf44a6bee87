//! The health contracts of the pipelines that take a node out of service, shared by `efatop check` and
//! `efatop sweep --format`: a verdict (ok, problems, or could not tell) becomes
//!
//! - a Kubernetes node-problem-detector custom-plugin result: exit 0 OK, 1 problem (`NonOK`), 2 unknown
//!   (NPD reads any other code as Unknown), and one line on stdout of at most [`NPD_MAX`] characters (NPD
//!   cuts at `max_output_length`, 80 in its example configs). A node whose problems only call for
//!   watching is OK there, with its line (`efatop: watch: ...`): NPD's NonOK sets the condition that
//!   cordons;
//! - a Slurm drain reason (`scontrol update nodename=N state=drain reason="efatop: ..."`), which is what an
//!   operator reads in `sinfo -R`; `--drain` runs scontrol, and resumes a node only when the drain reason
//!   is efatop's (never one an operator or another check set), as NHC's node-mark-online does;
//! - an LBNL NHC check message (`check_efatop:  ...`) for NHC's `die` (deploy/nhc/efatop.nhc).
//!
//! Every line is ASCII and names the faults by their short forms, worst first, with `(+N more)` when they
//! do not all fit.

use std::process::Command;

use efatop_proto::action::Action;

use crate::{Carrier, Report, Status};

/// node-problem-detector's message limit in its example custom-plugin configs.
pub const NPD_MAX: usize = 80;
/// A drain reason short enough to read whole in `sinfo -R -o '%100E'` and `scontrol show node`.
pub const SLURM_REASON_MAX: usize = 200;
/// Every drain reason efatop sets starts with this: `--drain` resumes only nodes drained with it.
pub const REASON_PREFIX: &str = "efatop:";
/// What NHC's die messages start with for this check.
pub const NHC_CHECK: &str = "check_efatop";

/// What a check or sweep concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing wrong; a few words on what was checked (`p5.48xlarge: 32 EFA, 8 GPUs`).
    Ok(String),
    /// What is wrong, each in a few words, worst first; something calls for draining the node (a
    /// reset, a reboot, a replacement).
    Problems(Vec<String>),
    /// What is wrong where nothing calls for more than watching (the node stays in service), worst first,
    /// and what could not be told besides (`None`: nothing).
    Watch { problems: Vec<String>, unknown: Option<String> },
    /// Could not tell, and why.
    Unknown(String),
}

impl Verdict {
    /// The exit code of every format but NPD's ([`npd`]): 0 ok, 1 a problem (watch included), 2 unknown.
    pub fn exit_code(&self) -> i32 {
        match self {
            Verdict::Ok(_) => 0,
            Verdict::Problems(_) | Verdict::Watch { .. } => 1,
            Verdict::Unknown(_) => 2,
        }
    }

    /// The problems' short forms, each group led by its action, when there are problems.
    pub fn problems(&self) -> Option<&[String]> {
        match self {
            Verdict::Problems(problems) | Verdict::Watch { problems, .. } => Some(problems),
            Verdict::Ok(_) | Verdict::Unknown(_) => None,
        }
    }
}

/// Keeps only printable ASCII (a control character or a non-ASCII name would garble a one-line
/// contract), spaces for the rest.
fn ascii(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { ' ' }).collect()
}

/// Cuts `text` to at most `max` characters, ending in `...` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// `prefix` then as many `items` as fit in `max` characters, joined by `; `, then `(+N more)` for the
/// rest; the first item is always there (cut if it alone is too long).
pub fn join_within(prefix: &str, items: &[String], max: usize) -> String {
    let items: Vec<String> = items.iter().map(|item| ascii(item)).collect();
    let Some(first) = items.first() else { return cut(prefix.trim_end(), max) };
    for shown in (1..=items.len()).rev() {
        let more = items.len() - shown;
        let tail = if more > 0 { format!(" (+{more} more)") } else { String::new() };
        let line = format!("{prefix}{}{tail}", items[..shown].join("; "));
        if line.len() <= max {
            return line;
        }
    }
    let more = items.len() - 1;
    let tail = if more > 0 { format!(" (+{more} more)") } else { String::new() };
    format!("{}{tail}", cut(&format!("{prefix}{first}"), max.saturating_sub(tail.len())))
}

/// node-problem-detector's line and exit code: 0 (OK) healthy, or only problems to watch (the line says
/// them: `efatop: watch: ...`; NonOK would set the condition that cordons); 1 (NonOK) a problem that
/// calls for draining; 2 (Unknown) could not tell, also beside problems to watch.
pub fn npd(verdict: &Verdict) -> (String, i32) {
    match verdict {
        Verdict::Ok(what) => (cut(&format!("efatop: ok: {}", ascii(what)), NPD_MAX), 0),
        Verdict::Problems(problems) => (join_within("efatop: ", problems, NPD_MAX), 1),
        Verdict::Watch { problems, unknown: None } => (join_within("efatop: ", problems, NPD_MAX), 0),
        Verdict::Watch { unknown: Some(why), .. } | Verdict::Unknown(why) => (cut(&format!("efatop: unknown: {}", ascii(why)), NPD_MAX), 2),
    }
}

/// The Slurm drain reason; `None` when there is nothing to drain for.
pub fn slurm_reason(verdict: &Verdict) -> Option<String> {
    verdict.problems().map(|problems| join_within(&format!("{REASON_PREFIX} "), problems, SLURM_REASON_MAX))
}

/// NHC's die message; `None` when the check passes (NHC has no "unknown": a check that cannot tell
/// passes, and says why on stderr).
pub fn nhc_message(verdict: &Verdict) -> Option<String> {
    verdict.problems().map(|problems| join_within(&format!("{NHC_CHECK}:  "), problems, SLURM_REASON_MAX))
}

/// The Slurm node this process runs on: `$SLURMD_NODENAME` (slurmd sets it for its health check and
/// prolog), else the short host name.
pub fn slurm_node_name(given: Option<&str>) -> String {
    if let Some(name) = given.map(str::trim).filter(|name| !name.is_empty()) {
        return name.to_string();
    }
    if let Some(name) = std::env::var("SLURMD_NODENAME").ok().filter(|name| !name.is_empty()) {
        return name;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    host.trim().split('.').next().unwrap_or_default().to_string()
}

/// A node's state and drain reason, from `scontrol show node` text: (`IDLE+DRAIN`, `efatop: ...`).
pub fn parse_node_state(text: &str) -> (Option<String>, Option<String>) {
    let mut state = None;
    let mut reason = None;
    for line in text.lines().map(str::trim) {
        for field in line.split_whitespace() {
            if let Some(value) = field.strip_prefix("State=") {
                state = Some(value.to_string());
            }
        }
        if let Some(rest) = line.strip_prefix("Reason=") {
            // `Reason=efatop: rdmap80s0 port 1 DOWN [root@2025-01-01T00:00:00]`: the reason runs to the
            // last ` [`, which says who set it and when.
            let text = rest.rsplit_once(" [").map_or(rest, |(reason, _)| reason);
            reason = Some(text.trim().to_string());
        }
    }
    (state, reason)
}

/// One line of a command's error output, however many it wrote: its lines joined with ` / `, made
/// printable and capped.
fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    efatop_proto::words::printable(&lines.join(" / "), SLURM_REASON_MAX)
}

fn scontrol(args: &[String]) -> Result<String, String> {
    let shown = one_line(&format!("scontrol {}", args.join(" ")));
    let output = Command::new("scontrol").args(args).output().map_err(|err| format!("{shown}: {err}"))?;
    if !output.status.success() {
        let said = one_line(&String::from_utf8_lossy(&output.stderr));
        let code = output.status.code().map_or_else(|| "killed by a signal".to_string(), |code| format!("exit {code}"));
        return Err(if said.is_empty() { format!("{shown}: {code}") } else { format!("{shown}: {code}: {said}") });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `scontrol update nodename=NODE state=drain reason=REASON`.
pub fn drain_with_reason(node: &str, reason: &str) -> Result<(), String> {
    scontrol(&["update".into(), format!("nodename={node}"), "state=drain".into(), format!("reason={reason}")]).map(|_| ())
}

/// What `--drain` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainAction {
    Drained(String),
    Resumed,
    Nothing,
}

/// Drains `node` with `verdict`'s reason when something calls for draining; resumes it when nothing is
/// wrong and the node is drained with a reason efatop set; leaves it alone when the verdict is unknown or
/// only calls for watching.
pub fn apply_to_slurm(node: &str, verdict: &Verdict) -> Result<DrainAction, String> {
    match verdict {
        Verdict::Problems(_) => {
            let reason = slurm_reason(verdict).unwrap_or_default();
            drain_with_reason(node, &reason)?;
            Ok(DrainAction::Drained(reason))
        }
        Verdict::Ok(_) => {
            let (state, reason) = parse_node_state(&scontrol(&["show".into(), "node".into(), node.to_string()])?);
            let drained = state.as_deref().is_some_and(|state| state.contains("DRAIN"));
            if drained && reason.as_deref().is_some_and(|reason| reason.starts_with(REASON_PREFIX)) {
                scontrol(&["update".into(), format!("nodename={node}"), "state=resume".into()])?;
                return Ok(DrainAction::Resumed);
            }
            Ok(DrainAction::Nothing)
        }
        Verdict::Unknown(_) | Verdict::Watch { .. } => Ok(DrainAction::Nothing),
    }
}

/// What `efatop check` found, as the contracts see it.
/// The problems' short forms, strongest action first, each group led by its action:
/// `replace: GPU 3 Xid 79`, `watch: rdmap80s0 PCIe x8 of x16; rdmap81s0 rx_drops +3`.
pub fn problem_lines(report: &Report) -> Vec<String> {
    let mut problems: Vec<&crate::Finding> = report.with_status(Status::Problem).collect();
    problems.sort_by_key(|finding| std::cmp::Reverse(finding.action));
    let mut previous = None;
    problems
        .into_iter()
        .map(|finding| {
            let lead = previous != Some(finding.action);
            previous = Some(finding.action);
            if lead { format!("{}: {}", finding.action, finding.short) } else { finding.short.clone() }
        })
        .collect()
}

/// The report as the contracts see it: its problems' short forms led by their actions
/// ([`problem_lines`]), or why it could not tell, or what was checked.
pub fn verdict(report: &Report) -> Verdict {
    match report.status {
        Status::Problem if report.action.drains() => Verdict::Problems(problem_lines(report)),
        Status::Problem => {
            let unknown: Vec<String> = report.with_status(Status::Unknown).map(|f| f.short.clone()).collect();
            Verdict::Watch { problems: problem_lines(report), unknown: (!unknown.is_empty()).then(|| unknown.join("; ")) }
        }
        Status::Unknown => {
            let unknown: Vec<String> = report.with_status(Status::Unknown).map(|f| f.short.clone()).collect();
            Verdict::Unknown(unknown.join("; "))
        }
        Status::Ok | Status::Skipped => {
            let ok = report.with_status(Status::Ok).count();
            let skipped = report.with_status(Status::Skipped).count();
            let instance = report.instance_type.as_deref().unwrap_or("instance type unknown");
            let traffic = report.traffic.as_ref().map_or(String::new(), |traffic| {
                // The provider as asked (`tcp`, not `tcp;ofi_rxm`): the line must fit node-problem-detector's 80.
                let nics = if traffic.carrier == Carrier::Nic { "" } else { " (not NICs)" };
                format!(", traffic via {}{nics}", traffic.provider)
            });
            Verdict::Ok(format!("{instance}: {ok} rules ok, {skipped} skipped{traffic}"))
        }
    }
}

/// One row per finding, then the verdict.
pub fn table(report: &Report) -> String {
    use std::fmt::Write as _;
    let instance = report.instance_type.as_deref().map_or("instance type unknown".to_string(), |t| format!("{t} ({})", report.instance_source));
    let traffic = report.traffic.as_ref().map_or(String::new(), |traffic| format!("  traffic via {}", traffic.via()));
    let mut text = format!("efatop check  {}  {instance}  window {:.1} s{traffic}\n", report.host, report.window_s);
    let _ = writeln!(text, "  {:<13} {:<8} {:<8} finding", "rule", "status", "action");
    for finding in &report.findings {
        let _ = writeln!(text, "  {:<13} {:<8} {:<8} {}", finding.rule.name(), finding.status.label(), finding.action.name(), finding.message);
    }
    let line = match verdict(report) {
        Verdict::Ok(_) => "ok: nothing wrong found".to_string(),
        Verdict::Problems(problems) | Verdict::Watch { problems, .. } => {
            let count = problems.len();
            format!("PROBLEM: {count} thing{} wrong: {}", if count == 1 { "" } else { "s" }, problems.join("; "))
        }
        Verdict::Unknown(why) => format!("UNKNOWN: could not tell: {why}"),
    };
    if report.action != Action::None {
        let _ = writeln!(text, "action: {} ({})", report.action, report.action_reason);
    }
    let _ = writeln!(text, "{line}");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(list: &[&str]) -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn lines_keep_what_fits_and_count_the_rest() {
        let problems = items(&["rdmap80s0 port 1 DOWN", "rdmap81s0 missing (30/32 EFA)", "memlock 64 KiB, not unlimited"]);
        assert_eq!(join_within("efatop: ", &problems[..1], 80), "efatop: rdmap80s0 port 1 DOWN");
        let line = join_within("efatop: ", &problems, 80);
        assert_eq!(line, "efatop: rdmap80s0 port 1 DOWN; rdmap81s0 missing (30/32 EFA) (+1 more)");
        assert!(line.len() <= 80);
        let long = items(&[&"x".repeat(200), "second"]);
        let line = join_within("efatop: ", &long, 80);
        assert_eq!(line.len(), 80, "{line}");
        assert!(line.ends_with("... (+1 more)"), "{line}");
        assert_eq!(join_within("efatop: ", &items(&["GPU \u{2192} NIC\u{7}"]), 80), "efatop: GPU   NIC ");
    }

    #[test]
    fn npd_exit_codes_and_lines() {
        assert_eq!(npd(&Verdict::Ok("p5.48xlarge: 32 EFA, 8 GPUs".into())), ("efatop: ok: p5.48xlarge: 32 EFA, 8 GPUs".into(), 0));
        assert_eq!(npd(&Verdict::Problems(items(&["rdmap80s0 port 1 DOWN"]))), ("efatop: rdmap80s0 port 1 DOWN".into(), 1));
        let (line, code) = npd(&Verdict::Unknown("y".repeat(100)));
        assert_eq!((line.len(), code), (80, 2));
        // Only problems to watch: OK with the line (NonOK would cordon); beside something unknown: Unknown.
        let watch = Verdict::Watch { problems: items(&["watch: rdmap80s0 PCIe x8 of x16"]), unknown: None };
        assert_eq!(npd(&watch), ("efatop: watch: rdmap80s0 PCIe x8 of x16".into(), 0));
        assert_eq!(watch.exit_code(), 1, "the other formats say it is a problem");
        let watch_unknown = Verdict::Watch { problems: items(&["watch: rdmap80s0 PCIe x8 of x16"]), unknown: Some("GPU 3 PCIe link unreadable".into()) };
        assert_eq!(npd(&watch_unknown), ("efatop: unknown: GPU 3 PCIe link unreadable".into(), 2));
    }

    #[test]
    fn slurm_and_nhc_say_nothing_unless_something_is_wrong() {
        let problem = Verdict::Problems(items(&["rdmap80s0 port 1 DOWN"]));
        assert_eq!(slurm_reason(&problem).as_deref(), Some("efatop: rdmap80s0 port 1 DOWN"));
        assert_eq!(nhc_message(&problem).as_deref(), Some("check_efatop:  rdmap80s0 port 1 DOWN"));
        for quiet in [Verdict::Ok("fine".into()), Verdict::Unknown("no EFA".into())] {
            assert_eq!(slurm_reason(&quiet), None);
            assert_eq!(nhc_message(&quiet), None);
        }
    }

    #[test]
    fn scontrol_node_text_gives_state_and_reason() {
        let text = "NodeName=node1 Arch=x86_64 CoresPerSocket=1\n   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0\n   \
                    Reason=efatop: rdmap80s0 port 1 DOWN [root@2025-11-25T12:00:00]\n";
        assert_eq!(parse_node_state(text), (Some("IDLE+DRAIN".into()), Some("efatop: rdmap80s0 port 1 DOWN".into())));
        assert_eq!(parse_node_state("NodeName=n State=IDLE Arch=x"), (Some("IDLE".into()), None));
    }

    #[test]
    fn a_commands_error_output_is_one_printable_line() {
        assert_eq!(one_line("scontrol: error: a\n\n  slurm_update error: \u{1b}[2JInvalid node\n"), "scontrol: error: a / slurm_update error: \\x1b[2JInvalid node");
        assert!(one_line(&"e\n".repeat(10_000)).len() < SLURM_REASON_MAX + 40);
    }

    #[test]
    fn the_node_name_is_the_one_given_first() {
        assert_eq!(slurm_node_name(Some("node7")), "node7");
        assert!(!slurm_node_name(None).contains('.'));
    }
}
