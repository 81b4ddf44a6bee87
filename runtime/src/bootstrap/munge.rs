//! Under srun without MPI, the ranks share no secret to start from. MUNGE, which every Slurm cluster runs to
//! vouch for its users, gives them one: each credential names the user who made it (its daemon decides,
//! not the caller), is encrypted with the cluster's key, lives minutes, and is decoded at most once per node.
//!
//! A rank joining rank 0's rendezvous proves it runs as rank 0's user, for this job step, answering rank 0's
//! fresh nonce; rank 0 answers with a credential only that user can decode (`--restrict-uid`), carrying the
//! rank's nonce and the run's secret. A stranger's credential names another user and is refused; a
//! squatter on the port cannot make a credential of the job's user, so ranks never believe it. The `munge`
//! and `unmunge` commands do the work: payloads travel on their standard input and output, never on a
//! command line that `ps` shows.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use efatop_auth::{Secret, Session, Side};
use efatop_proto::handshake::Purpose;

/// Names munged's socket, where the cluster's is not at munge's default path.
pub const ENV_SOCKET: &str = "EFATOP_MUNGE_SOCKET";
/// A credential is a line of base64 of a few hundred bytes: anything longer is not one.
const MAX_CREDENTIAL: u32 = 8192;
const NONCE: usize = 32;

/// How a rank's side of the exchange failed: the party said nothing (a rank 0 whose handshakes are all
/// taken closes so; worth another try), or it answered and proved nothing (a stranger, or another step).
#[derive(Debug)]
pub enum JoinFailure {
    NoChallenge(String),
    Unproven(String),
}

impl std::fmt::Display for JoinFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoChallenge(why) | Self::Unproven(why) => f.write_str(why),
        }
    }
}

/// One job step's MUNGE exchange.
#[derive(Clone, Debug)]
pub struct Munge {
    /// `job.step`, bound into every payload: a rank of another step of the same user is refused too.
    step: String,
    socket: Option<String>,
    uid: u32,
}

impl Munge {
    pub fn new(job: &str, step: &str) -> Self {
        Self { step: format!("{job}.{step}"), socket: socket(), uid: nix::unistd::geteuid().as_raw() }
    }

    /// Rank 0's side: checks the joining rank's credential, then hands it the secret; the keys that seal
    /// what follows (the secret over both nonces, as the token's handshake derives them).
    pub fn admit(&self, stream: &mut (impl Read + Write), secret: &Secret) -> Result<Session, String> {
        let nonce = random()?;
        stream.write_all(&nonce).and_then(|()| stream.flush()).map_err(|e| e.to_string())?;
        let credential = read_credential(stream)?;
        let (uid, payload) = self.decode(&credential)?;
        if uid != self.uid {
            return Err(format!("a credential of uid {uid}, not of this job's user ({})", self.uid));
        }
        let theirs = parse_payload(&payload, "join", &self.step, &nonce)?;
        let mut their_nonce = [0u8; NONCE];
        hex::decode_to_slice(&theirs, &mut their_nonce)
            .map_err(|_| "a credential whose nonce is not 64 hex digits".to_string())?;
        let answer = format!("efatop-secret {} {theirs} {}", self.step, secret.to_hex());
        let credential = self.encode(&answer, true)?;
        write_credential(stream, &credential)?;
        Ok(Session::derive(
            secret,
            Purpose::Rendezvous,
            &nonce,
            &their_nonce,
            Side::Listener,
        ))
    }

    /// A rank's side: proves its user to rank 0 and takes the run's secret from rank 0's answer, and the
    /// keys that seal what follows.
    pub fn join(&self, stream: &mut (impl Read + Write)) -> Result<(Secret, Session), JoinFailure> {
        let mut nonce = [0u8; NONCE];
        stream.read_exact(&mut nonce).map_err(|e| JoinFailure::NoChallenge(format!("no challenge from rank 0: {e}")))?;
        self.answer(stream, &nonce).map_err(JoinFailure::Unproven)
    }

    /// The rest of [`Munge::join`], once rank 0's challenge is in.
    fn answer(
        &self,
        stream: &mut (impl Read + Write),
        nonce: &[u8; NONCE],
    ) -> Result<(Secret, Session), String> {
        let mine = random()?;
        let payload = format!("efatop-join {} {} {}", self.step, hex::encode(nonce), hex::encode(mine));
        write_credential(stream, &self.encode(&payload, false)?)?;
        let credential = read_credential(stream)?;
        let (uid, payload) = self.decode(&credential)?;
        if uid != self.uid {
            return Err(format!("rank 0's answer is a credential of uid {uid}, not of this job's user ({})", self.uid));
        }
        let secret = parse_payload(&payload, "secret", &self.step, &mine)?;
        let secret = Secret::from_hex(&secret).map_err(|e| e.to_string())?;
        let session = Session::derive(&secret, Purpose::Rendezvous, nonce, &mine, Side::Caller);
        Ok((secret, session))
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        if let Some(socket) = &self.socket {
            command.args(["--socket", socket]);
        }
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        command
    }

    /// A credential of this process's user carrying `payload`; with `restrict`, only that user can decode it.
    fn encode(&self, payload: &str, restrict: bool) -> Result<String, String> {
        let mut command = self.command("munge");
        if restrict {
            command.args(["--restrict-uid", &self.uid.to_string()]);
        }
        let output = run(command, payload.as_bytes())?;
        Ok(String::from_utf8_lossy(&output).trim().to_string())
    }

    /// The user a credential names, and its payload.
    fn decode(&self, credential: &str) -> Result<(u32, String), String> {
        let mut command = self.command("unmunge");
        command.arg("--numeric");
        let output = run(command, credential.as_bytes())?;
        let text = String::from_utf8_lossy(&output);
        let (metadata, payload) = text.split_once("\n\n").ok_or("unmunge printed no payload")?;
        let field = |key: &str| metadata.lines().find_map(|line| line.strip_prefix(key)).map(str::trim);
        let uid = field("UID:").and_then(|v| v.parse().ok()).ok_or("unmunge named no user")?;
        Ok((uid, payload.to_string()))
    }
}

/// munged's socket: [`ENV_SOCKET`], else the one slurm.conf's `AuthInfo` names (`SLURM_CONF`, else
/// `/etc/slurm/slurm.conf`), else munge's default.
fn socket() -> Option<String> {
    if let Ok(socket) = std::env::var(ENV_SOCKET) {
        return Some(socket);
    }
    let conf = std::env::var("SLURM_CONF").unwrap_or_else(|_| "/etc/slurm/slurm.conf".into());
    let text = std::fs::File::open(conf).ok().and_then(|file| {
        let mut text = String::new();
        file.take(1 << 20).read_to_string(&mut text).ok().map(|_| text)
    })?;
    socket_in_slurm_conf(&text)
}

fn socket_in_slurm_conf(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix("AuthInfo="))
        .and_then(|info| info.split(',').find_map(|part| part.trim().strip_prefix("socket=")))
        .map(str::to_string)
}

fn run(mut command: Command, input: &[u8]) -> Result<Vec<u8>, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command.spawn().map_err(|e| format!("cannot run {program} (is MUNGE installed?): {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).map_err(|e| format!("{program}: {e}"))?;
    }
    let output = child.wait_with_output().map_err(|e| format!("{program}: {e}"))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let first = said.lines().next().unwrap_or("").trim();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let status = stdout.lines().find_map(|l| l.strip_prefix("STATUS:")).map_or(first, str::trim);
        return Err(format!("{program} failed ({}): {status}", output.status));
    }
    Ok(output.stdout)
}

fn random() -> Result<[u8; NONCE], String> {
    let mut bytes = [0u8; NONCE];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random source: {e}"))?;
    Ok(bytes)
}

/// `efatop-<kind> <step> <our nonce> <theirs>`: checks the kind, the step and our nonce; returns theirs.
fn parse_payload(payload: &str, kind: &str, step: &str, ours: &[u8; NONCE]) -> Result<String, String> {
    let mut words = payload.split_whitespace();
    let (Some(tag), Some(their_step), Some(echoed), Some(rest), None) = (words.next(), words.next(), words.next(), words.next(), words.next()) else {
        return Err("a credential that is not efatop's".into());
    };
    if tag != format!("efatop-{kind}") {
        return Err(format!("a credential for `{tag}`, not efatop-{kind}"));
    }
    if their_step != step {
        return Err(format!("a credential for job step {their_step}, not {step}"));
    }
    if echoed != hex::encode(ours) {
        return Err("a credential answering another challenge (replayed?)".into());
    }
    Ok(rest.to_string())
}

fn write_credential(stream: &mut impl Write, credential: &str) -> Result<(), String> {
    let len = u32::try_from(credential.len()).map_err(|_| "credential too long".to_string())?;
    stream
        .write_all(&len.to_le_bytes())
        .and_then(|()| stream.write_all(credential.as_bytes()))
        .and_then(|()| stream.flush())
        .map_err(|e| e.to_string())
}

fn read_credential(stream: &mut impl Read) -> Result<String, String> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).map_err(|e| format!("no credential: {e}"))?;
    let len = u32::from_le_bytes(len);
    if len > MAX_CREDENTIAL {
        return Err(format!("a credential of {len} bytes (at most {MAX_CREDENTIAL})"));
    }
    let mut credential = vec![0u8; len as usize];
    stream.read_exact(&mut credential).map_err(|e| format!("a credential cut short: {e}"))?;
    String::from_utf8(credential).map_err(|_| "a credential that is not text".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A munged of the test's own (key, socket), stopped when dropped; `None`, said on stderr, where munged
    /// or mungekey is missing (scripts/build/setup-debian installs them; CI has them).
    struct Daemon {
        dir: tempfile::TempDir,
    }

    impl Daemon {
        fn start() -> Option<Self> {
            let dir = tempfile::tempdir().ok()?;
            let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
            let key = Command::new("mungekey").args(["--create", "--keyfile", &path("key"), "--bits", "1024"]).status();
            if !key.is_ok_and(|s| s.success()) {
                eprintln!("munge tests: SKIPPED: mungekey is missing (Debian package munge)");
                return None;
            }
            let started = Command::new("munged")
                .args(["--force", "--socket", &path("socket"), "--key-file", &path("key"), "--pid-file", &path("pid")])
                .args(["--log-file", &path("log"), "--seed-file", &path("seed")])
                .status();
            if !started.is_ok_and(|s| s.success()) {
                eprintln!("munge tests: SKIPPED: munged did not start");
                return None;
            }
            Some(Self { dir })
        }

        fn munge(&self, job: &str, step: &str) -> Munge {
            Munge { step: format!("{job}.{step}"), socket: Some(self.dir.path().join("socket").to_string_lossy().into_owned()), uid: nix::unistd::geteuid().as_raw() }
        }
    }

    impl Drop for Daemon {
        fn drop(&mut self) {
            if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("pid")) {
                if let Ok(pid) = pid.trim().parse::<i32>() {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
                }
            }
        }
    }

    /// Rank 0 and a rank of the same user and step: the rank gets the secret. A rank of another step of the
    /// same user, and a credential made by another user (`nobody`, where the test runs as root), are refused.
    #[test]
    fn munge_hands_the_secret_to_the_jobs_own_user_and_step_only() {
        let Some(daemon) = Daemon::start() else { return };
        let secret = Secret::generate().expect("secret");
        let exchange = |rank0: Munge, rank: Munge| {
            let (mut a, mut b) = std::os::unix::net::UnixStream::pair().expect("pair");
            let secret = secret.clone();
            let server = std::thread::spawn(move || rank0.admit(&mut a, &secret));
            let joined = rank.join(&mut b);
            (server.join().expect("rank 0"), joined)
        };
        let (admitted, joined) = exchange(daemon.munge("7", "0"), daemon.munge("7", "0"));
        let mut rank0 = admitted.expect("admitted");
        let (taken, mut rank) = joined.expect("joined");
        assert_eq!(taken, secret);
        // Both sides hold the same keys: what the rank seals, rank 0 opens.
        let mut record = Vec::new();
        rank.sealer.seal(b"rank 1", &mut record).expect("seal");
        assert_eq!(rank0.opener.open(&mut record).expect("open"), b"rank 1");
        let (admitted, joined) = exchange(daemon.munge("7", "0"), daemon.munge("7", "1"));
        assert!(admitted.expect_err("another step").contains("job step 7.1"));
        assert!(joined.is_err());
        // Another user's credential, answering rank 0's real challenge.
        if !nix::unistd::geteuid().is_root() || Command::new("setpriv").arg("--version").output().is_err() {
            eprintln!("munge tests: SKIPPED the other user's credential: not root, or no setpriv");
            return;
        }
        let rank0 = daemon.munge("7", "0");
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let server = std::thread::spawn(move || rank0.admit(&mut a, &Secret::generate().expect("secret")));
        let mut nonce = [0u8; NONCE];
        b.read_exact(&mut nonce).expect("challenge");
        let payload = format!("efatop-join 7.0 {} {}", hex::encode(nonce), hex::encode([1u8; NONCE]));
        let mut stranger = Command::new("setpriv");
        stranger.args(["--reuid=65534", "--regid=65534", "--clear-groups", "munge", "--socket"]);
        stranger.arg(daemon.dir.path().join("socket")).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let credential = run(stranger, payload.as_bytes()).expect("nobody's credential");
        write_credential(&mut b, String::from_utf8_lossy(&credential).trim()).expect("send");
        let refused = server.join().expect("rank 0").expect_err("another user's credential");
        assert!(refused.contains("uid 65534"), "{refused}");
    }

    #[test]
    fn slurm_conf_names_munges_socket() {
        let conf = "# AuthInfo=socket=/wrong\nAuthType=auth/munge\nAuthInfo=cred_expire=60,socket=/tmp/x/munge.socket.2\n";
        assert_eq!(socket_in_slurm_conf(conf).as_deref(), Some("/tmp/x/munge.socket.2"));
        assert_eq!(socket_in_slurm_conf("AuthType=auth/munge\n"), None);
    }

    #[test]
    fn payloads_bind_step_and_nonce() {
        let nonce = [7u8; NONCE];
        let good = format!("efatop-join 42.0 {} abcd", hex::encode(nonce));
        assert_eq!(parse_payload(&good, "join", "42.0", &nonce).unwrap(), "abcd");
        assert!(parse_payload(&good, "join", "42.1", &nonce).unwrap_err().contains("job step"));
        assert!(parse_payload(&good, "secret", "42.0", &nonce).is_err());
        assert!(parse_payload(&good, "join", "42.0", &[8u8; NONCE]).unwrap_err().contains("another challenge"));
        assert!(parse_payload("hello", "join", "42.0", &nonce).is_err());
    }
}
