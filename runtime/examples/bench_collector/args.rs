//! The bench's arguments: the synthetic fleet it feeds rank 0 with.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Can rank 0 keep up with a large job? A synthetic fleet feeds rank 0's real collector and loop.
#[derive(Debug, Parser)]
#[command(name = "bench_collector")]
pub struct BenchCollectorArgs {
    /// Synthetic ranks, one connection each, all on one host (see --hosts for a fleet)
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub ranks: u32,
    /// Synthetic hosts of --ranks-per-host ranks each (named p5-node-0000 ...), instead of --ranks
    #[arg(long, conflicts_with = "ranks", value_parser = clap::value_parser!(u32).range(1..=16384))]
    pub hosts: Option<u32>,
    /// Ranks per host, with --hosts
    #[arg(long, default_value_t = 8, requires = "hosts", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub ranks_per_host: u32,
    /// Channels per rank
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub channels: u32,
    /// Samples per second per rank
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub hz: u32,
    /// How long to run
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=600))]
    pub seconds: u32,
    /// Consume as `--json` does (a line per rank and channel on stdout; the bench's table goes to stderr)
    /// instead of the dashboard
    #[arg(long)]
    pub json: bool,
    /// With --json: `rail` lines (per host and rail, every interval) instead of a line per channel, as
    /// efatop's `--json` prints them beyond 32768 channels; `auto` decides as it does
    #[arg(long, value_name = "auto|every|rails", default_value = "auto", value_parser = ["auto", "every", "rails"], requires = "json")]
    pub json_samples: String,
    /// Make one NIC slow from a time on: host HOST's rank RANK (within the host), its channel CHANNEL, at
    /// FRACTION of its rate from SECONDS into the load (e.g. 700:3:2@3=0.6)
    #[arg(long, value_name = "HOST:RANK:CHANNEL@SECONDS=FRACTION", value_parser = parse_slow)]
    pub slow: Option<Slow>,
    /// Each rank its own connection to rank 0, as before hosts' relays: by default (with --hosts) each host's
    /// ranks reach rank 0 over one connection, a write of the host's frames every interval, as a host's
    /// relay (efatop_runtime::relay) forwards them
    #[arg(long, requires = "hosts")]
    pub no_relay: bool,
    /// A host's relay forwards every this many intervals (each write then holds that many samples a rank);
    /// by default as a run's relays do (efatop_runtime::relay::Plan::forward_every: 1 up to 2048 relays)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10), conflicts_with = "no_relay")]
    pub relay_every: Option<u32>,
    /// Record the run's events as a run's --record does (`efatop replay FILE` plays them)
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Serve the run as `--serve 127.0.0.1:0` does, to this many viewers of the bench's own (threads on the
    /// senders' CPUs, as remote `efatop attach` processes would be) that prove the token, take every message
    /// and count the samples they got and the batches dropped for them
    #[arg(long, value_name = "VIEWERS", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub serve: Option<u32>,
    /// Instead of a live load: play this recording (made with --record) in the dashboard as `efatop
    /// replay` plays it at 1x, a frame every 50 ms of the run's time, as fast as it goes; report frame
    /// times and the RSS of a process that played the whole run
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "record", "slow", "hosts", "serve"])]
    pub fold: Option<PathBuf>,
    /// The dashboard's screen, for its frame times
    #[arg(long, default_value = "200x60", value_name = "WIDTHxHEIGHT", value_parser = parse_screen)]
    pub screen: (u16, u16),
}

/// `--slow HOST:RANK:CHANNEL@SECONDS=FRACTION`: host `HOST`'s rank `RANK` (counted within the host), its
/// channel `CHANNEL`, at `FRACTION` of its rate from `SECONDS` into the load on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slow {
    pub host: usize,
    pub rank: usize,
    pub channel: usize,
    pub at: Duration,
    pub fraction: f64,
}

/// clap's parser for `--slow`.
pub fn parse_slow(text: &str) -> Result<Slow, String> {
    let refuse = || format!("`{text}` is not HOST:RANK:CHANNEL@SECONDS=FRACTION (e.g. 700:3:2@3=0.6: host 700's rank 3, channel 2, at 60% from 3 s on)");
    let (nic, rest) = text.split_once('@').ok_or_else(refuse)?;
    let (at, fraction) = rest.split_once('=').ok_or_else(refuse)?;
    let parts: Vec<usize> = nic.split(':').map(str::parse).collect::<Result<_, _>>().map_err(|_| refuse())?;
    let [host, rank, channel] = parts[..] else { return Err(refuse()) };
    let at: f64 = at.parse().map_err(|_| refuse())?;
    let fraction: f64 = fraction.parse().map_err(|_| refuse())?;
    if !(at >= 0.0 && at.is_finite() && (0.0..=1.0).contains(&fraction)) {
        return Err(refuse());
    }
    Ok(Slow { host, rank, channel, at: Duration::from_secs_f64(at), fraction })
}


fn parse_screen(text: &str) -> Result<(u16, u16), String> {
    let refuse = || format!("`{text}` is not WIDTHxHEIGHT (e.g. 200x60)");
    let (width, height) = text.split_once('x').ok_or_else(refuse)?;
    let (width, height): (u16, u16) = (width.parse().map_err(|_| refuse())?, height.parse().map_err(|_| refuse())?);
    if width == 0 || height == 0 {
        return Err(refuse());
    }
    Ok((width, height))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_nics_and_screens_are_read_from_their_flags_or_refused_with_an_example() {
        assert_eq!(
            parse_slow("700:3:2@3=0.6"),
            Ok(Slow { host: 700, rank: 3, channel: 2, at: Duration::from_secs(3), fraction: 0.6 })
        );
        assert_eq!(parse_slow("1:0:0@0.5=0").map(|slow| slow.at), Ok(Duration::from_millis(500)));
        for bad in ["700:3:2", "700:3@3=0.6", "a:3:2@3=0.6", "700:3:2@-1=0.6", "700:3:2@3=1.5", "1:2:3:4@1=0.5"] {
            assert!(parse_slow(bad).is_err_and(|why| why.contains("HOST:RANK:CHANNEL@SECONDS=FRACTION")), "{bad}");
        }
        assert_eq!(parse_screen("200x60"), Ok((200, 60)));
        assert!(parse_screen("200").is_err() && parse_screen("0x60").is_err());
    }
}
