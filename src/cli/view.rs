//! `efatop attach` and `efatop replay`, and `--serve`'s address.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Where rank 0 serves the run (its `--serve`), e.g. 127.0.0.1:41234 or node7:41234
    #[arg(value_name = "HOST:PORT")]
    pub address: String,
    /// Print the run's JSON lines (as its own `--json` would) instead of the dashboard
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A recording made with `--record FILE`
    pub file: PathBuf,
    /// Playback speed: 1 plays the run as it went, 4 four times as fast (0.25 to 64)
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    pub speed: f64,
    /// Print the recorded run's JSON lines (as its own `--json` did) at once, instead of playing it
    #[arg(long)]
    pub json: bool,
}

fn parse_speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(speed) if (0.25..=64.0).contains(&speed) => Ok(speed),
        _ => Err(format!("`{text}` is not a playback speed; use 0.25 to 64, e.g. 4")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_speed;
    use crate::parse::parse_serve;

    #[test]
    fn serve_addresses_default_to_this_host() {
        assert_eq!(parse_serve("7420").map(|a| a.to_string()), Ok("127.0.0.1:7420".into()));
        assert_eq!(parse_serve("0.0.0.0:0").map(|a| a.to_string()), Ok("0.0.0.0:0".into()));
        assert!(parse_serve("somewhere").is_err());
        assert!(parse_speed("0").is_err() && parse_speed("4").is_ok());
    }
}
