//! Command-line flags and their defaults. memcached's own flags where they mean the same
//! thing (`-p -l -t -c -m -I -v`), plus Kura's data directory and durability.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgAction, CommandFactory, Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityFlag {
    /// Reply after fsync; concurrent writers share one fsync (group commit).
    Fsync,
    /// Reply once the write reached the operating system; fsync every interval.
    Interval,
    /// Reply at once. For comparison only: a crash may lose recent writes.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColdReadsFlag {
    /// Each worker reads through an io_uring of its own, with no hand-off to another
    /// thread (the reader threads where the kernel refuses io_uring).
    IoUring,
    /// The workers hand reads to the reader threads (`--read-threads`).
    Threads,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplicaReads {
    /// A replica in a cluster forwards reads to its shard's primary: every read sees
    /// every acknowledged write.
    Primary,
    /// A replica answers reads from its own copy, which may lag the primary's.
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Kura: a persistent key-value server that speaks the memcached protocol.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kura",
    version,
    disable_help_flag = true,
    args_override_self = true
)]
pub struct Config {
    /// Print help.
    #[arg(long = "help", action = ArgAction::Help)]
    pub help: Option<bool>,
    /// A TOML file of settings: a key per flag (`memory-limit = 2048`, `verbose = 1`);
    /// flags on the command line override it. `kura config check [flags]` prints the
    /// settings that result and where each came from.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TCP port to listen on; 0 picks a free one (printed on stdout).
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    pub port: u16,
    /// Interface to listen on.
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1")]
    pub listen: String,
    /// Worker threads serving connections.
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    pub threads: usize,
    /// Most simultaneous connections; more are refused as memcached refuses them.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    pub connections_max: usize,
    /// As memcached's -R: after this many requests from one read, a connection lets
    /// the other connections of its worker run before it goes on (`conn_yields`).
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub reqs_per_event: usize,
    /// As memcached's idle_timeout: close a connection that sends nothing for this many
    /// seconds (`idle_kicks`); 0 = never.
    #[arg(long = "idle-timeout", default_value_t = 0)]
    pub idle_timeout_secs: u64,
    /// Memory in MiB for the index and the values held in memory. Values that do not
    /// fit stay on disk and are read back when wanted; only when the keys alone fill it
    /// do stores get `SERVER_ERROR out of memory storing object`. 0 = no limit.
    #[arg(short = 'm', long = "memory-limit", default_value_t = 1024)]
    pub memory_limit_mib: u64,
    /// How values not held in memory are read from the log: on each worker through
    /// an io_uring, or by the reader threads.
    #[arg(long = "cold-reads", value_enum, default_value_t = ColdReadsFlag::IoUring)]
    pub cold_reads: ColdReadsFlag,
    /// Threads that read values not held in memory from the log, with `--cold-reads
    /// threads` or where the kernel refuses io_uring: how many such reads can be in
    /// flight at once (the disk's queue depth Kura uses).
    #[arg(long, default_value_t = 16)]
    pub read_threads: usize,
    /// Largest item, as memcached's -I: bytes, or with a k or m suffix.
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    pub item_size_max_bytes: usize,
    /// Verbose logging to stderr; repeat for more.
    #[arg(short = 'v', action = ArgAction::Count)]
    pub verbose: u8,
    /// How log lines on stderr are written: `text`, or `json` (one object a line, for
    /// journald or a log shipper).
    #[arg(long = "log-format", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Where the log lives.
    #[arg(long = "data-dir", default_value = "kura-data")]
    pub data_dir: PathBuf,
    /// When a write is acknowledged. Default fsync: a database that forgets acknowledged
    /// writes on power loss is a cache; group commit makes fsync affordable.
    #[arg(long = "durability", value_enum, default_value_t = DurabilityFlag::Fsync)]
    pub durability: DurabilityFlag,
    /// fsync period for `--durability interval`, in milliseconds.
    #[arg(long = "fsync-interval-ms", default_value_t = 1000)]
    pub fsync_interval_ms: u64,
    /// Seconds between index checkpoints (written only if the log moved), and one at
    /// shutdown; 0 = none. A restart reads the newest checkpoint and the log after it.
    #[arg(long = "checkpoint-secs", default_value_t = 60)]
    pub checkpoint_secs: u64,
    /// Also write an index checkpoint once the log has grown this many MiB since the
    /// last one (or by the last checkpoint's own size, when that is larger): a restart
    /// after a crash then replays about that much at most, however fast writes came.
    /// 0 = by time only (and with `--checkpoint-secs 0`, none at all).
    #[arg(long = "checkpoint-log-mib", default_value_t = 128)]
    pub checkpoint_log_mib: u64,
    /// Size at which the log starts a new segment file, in MiB (at most 64: the index
    /// addresses a record by its offset in 26 bits).
    #[arg(long = "segment-size-mib", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub segment_size_mib: u64,
    /// A file of MySQL `CREATE TABLE` statements: the tables it declares are created
    /// if they do not exist (one that exists must be declared the same).
    #[arg(long = "schema")]
    pub schema: Option<PathBuf>,
    /// MySQL-protocol port on the `-l` address, for SQL over the same rows; 0 picks a
    /// free one (printed on stdout); `off` serves no SQL.
    #[arg(long = "sql-port", default_value = "3306", value_parser = parse_sql_port)]
    pub sql_port: SqlPort,
    /// Start as a replica of the primary at HOST:PORT (its memcached port): follow its
    /// log and serve reads; changes get `SERVER_ERROR` naming the primary. Remembered
    /// in the data directory until `replicaof no one`.
    #[arg(long = "replica-of", value_name = "HOST:PORT")]
    pub replica_of: Option<String>,
    /// Cluster mode: etcd's client URLs (`http://HOST:PORT`, comma-separated). The
    /// nodes of a shard (`--cluster`, `--shard`) elect its primary through an etcd
    /// lease; the others follow it. Needs `--cluster` and `--shard`; not with
    /// `--replica-of`, as etcd says whom to follow.
    #[arg(long = "etcd", value_name = "URLS", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// The cluster's name in etcd (cluster mode).
    #[arg(long = "cluster", value_name = "NAME")]
    pub cluster: Option<String>,
    /// The shard this node serves (cluster mode).
    #[arg(long = "shard", value_name = "NAME")]
    pub shard: Option<String>,
    /// The address (`HOST:PORT` of the memcached port) other nodes and clients reach
    /// this node at; the listen address and port by default.
    #[arg(long = "advertise", value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// In cluster mode, where a replica's reads are answered: by its shard's primary
    /// (forwarded, as its changes are), or from its own copy.
    #[arg(long = "replica-reads", value_enum, default_value_t = ReplicaReads::Primary)]
    pub replica_reads: ReplicaReads,
    /// The lease that holds a node's place in its shard, in milliseconds: a primary
    /// that stops renewing it (crashed, cut off) is replaced within about this long,
    /// and stops taking changes before then. etcd counts whole seconds.
    #[arg(long = "lease-ttl-ms", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(1000..=600_000))]
    pub lease_ttl_ms: u64,
    /// While the ring changes (`kura cluster ring`), the longest a source shard's
    /// primary holds changes to the keys it hands to another shard, in milliseconds:
    /// reads go on; a held change goes on to the new owner once the hand-off is
    /// done, or is made here if the hand-off gives up.
    #[arg(long = "move-pause-ms", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub move_pause_ms: u64,
    /// While the ring changes, the most changes a second a target shard's primary
    /// copies from each source (0: as fast as it can), so that a move leaves the
    /// disks and the network to the clients.
    #[arg(long = "move-copy-rate", value_name = "CHANGES", default_value_t = 0)]
    pub move_copy_rate: u64,
    /// Acknowledge a change only once this many replicas have it on their disk (and
    /// this node has it on its own). With fewer replicas connected a change is refused
    /// before it is made; past `--sync-timeout-ms` the client gets `SERVER_ERROR`, never
    /// a false `STORED`. 0 = replicas follow asynchronously.
    #[arg(long = "min-sync-replicas", default_value_t = 0)]
    pub min_sync_replicas: u8,
    /// How long a change waits for `--min-sync-replicas` (or a meta `Y<n>` flag)
    /// before its client gets `SERVER_ERROR`, in milliseconds.
    #[arg(long = "sync-timeout-ms", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sync_timeout_ms: u64,
    /// How far (MiB of log) a replica streaming from this node may fall behind it.
    /// A replica further behind holds segments compaction would remove, so its stream
    /// is ended, and it gets a full copy when it comes back; this bounds the disk a
    /// slow replica costs its primary. A full copy in progress is not held to it.
    #[arg(long = "replica-backlog-mib", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub replica_backlog_mib: u64,
    /// How long a stream to an asynchronous replica lets the log gather after it has
    /// sent all it could, in milliseconds: a busy primary then wakes each stream, and
    /// each replica applies, syncs and acknowledges, once per linger rather than once
    /// per group commit; the replica's lag grows by up to this much. A stream looks
    /// again at once while a request waits for replicas (`--min-sync-replicas`, a meta
    /// `Y` flag). 0 = send every group commit.
    #[arg(long = "replica-linger-ms", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub replica_linger_ms: u64,
    /// Serve Prometheus metrics (`GET /metrics`) on this port of `--metrics-listen`;
    /// 0 picks a free one (printed on stdout). Off unless given.
    #[arg(long = "metrics-port")]
    pub metrics_port: Option<u16>,
    /// The interface of `--metrics-port`: loopback unless the operator opens it. Off
    /// the loopback it needs `--metrics-token-file` (or `--insecure`).
    #[arg(long = "metrics-listen", default_value = "127.0.0.1")]
    pub metrics_listen: String,
    /// A file whose first line is a bearer token (16 or more visible ASCII
    /// characters): every metrics request must carry `Authorization: Bearer <token>`,
    /// else it gets 401.
    #[arg(long = "metrics-token-file", value_name = "FILE")]
    pub metrics_token_file: Option<PathBuf>,
    /// memcached's auth file: `user:password` lines (or `user:<argon2 PHC hash>`) of
    /// who may use the memcached port. Every connection then logs in first: text and
    /// meta ones as with memcached's -Y, binary ones with SASL PLAIN.
    #[arg(short = 'Y', long = "auth-file")]
    pub auth_file: Option<PathBuf>,
    /// Administrative users, in the -Y file's format: who may run the commands that
    /// change what the node is (`replicaof`, `fence`, replication and backup streams,
    /// `shutdown`, `refresh_certs`, `cache_memlimit`, `verbosity`). They may do all
    /// that -Y's users may; -Y's users may not run these. Replicas and `kura backup`
    /// log in as one of them (`--replication-login`).
    #[arg(long = "admin-auth-file", value_name = "FILE")]
    pub admin_auth_file: Option<PathBuf>,
    /// Listen off the loopback (`-l`) with no users file (-Y): anyone who reaches the
    /// port may read and change everything. Without this flag Kura refuses to start so.
    /// Also lets metrics be served off the loopback without `--metrics-token-file`.
    #[arg(long = "insecure")]
    pub insecure: bool,
    /// A file with one `user:password` line: how this node logs in (with the text
    /// protocol's login) to the nodes it connects to, its primary and an old primary it
    /// fences, when they have a users file (-Y).
    #[arg(long = "replication-login", value_name = "FILE")]
    pub replication_login: Option<PathBuf>,
    /// memcached's -S (SASL on the binary protocol). Kura's SASL checks the -Y users
    /// file, so this needs -Y; with -Y, SASL is on anyway.
    #[arg(short = 'S', long = "enable-sasl")]
    pub enable_sasl: bool,
    /// memcached's -Z: TLS on the memcached port, which then speaks nothing else, and
    /// required on the SQL port. Needs `--ssl-chain-cert`.
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// memcached's -o with its TLS keys, comma-separated: `ssl_chain_cert`, `ssl_key`,
    /// `ssl_ca_cert`, `ssl_verify_mode`, `ssl_min_version` (the same settings as the
    /// `--ssl-*` flags). Other keys are refused.
    #[arg(short = 'o', long = "extended", action = ArgAction::Append, value_delimiter = ',')]
    pub extended: Vec<String>,
    /// The server's certificate chain (PEM, leaf first). Reread on SIGHUP and on
    /// `refresh_certs`.
    #[arg(long = "ssl-chain-cert", value_name = "FILE")]
    pub ssl_chain_cert: Option<PathBuf>,
    /// The server's private key (PEM); without it, the key is read from the chain file.
    #[arg(long = "ssl-key", value_name = "FILE")]
    pub ssl_key: Option<PathBuf>,
    /// The CAs (PEM) that sign clients' certificates, and with `--tls-replication` the
    /// primary's.
    #[arg(long = "ssl-ca-cert", value_name = "FILE")]
    pub ssl_ca_cert: Option<PathBuf>,
    /// Client certificates: 0 not asked for, 1 asked for, 2 required, 3 required once
    /// (as 2: TLS 1.3 and rustls never renegotiate). memcached's numbers; default 0.
    #[arg(long = "ssl-verify-mode", value_name = "0-3")]
    pub ssl_verify_mode: Option<String>,
    /// The oldest TLS version accepted: 2 (`tlsv1.2`, the default) or 3 (`tlsv1.3`).
    #[arg(long = "ssl-min-version", value_name = "VERSION")]
    pub ssl_min_version: Option<String>,
    /// Connect to the primary (and to an old primary this node fences) with TLS: its
    /// certificate checked against `--ssl-ca-cert` for the primary's host name, this
    /// node's own chain shown as its client certificate when it has one.
    #[arg(long = "tls-replication")]
    pub tls_replication: bool,
    /// A file of `user:password` lines: who may log in on the SQL port. Without it,
    /// `root` with no password, allowed only while `-l` is a loopback address.
    #[arg(long = "sql-users")]
    pub sql_users: Option<PathBuf>,
    /// MySQL's connect_timeout: a SQL connection that has not completed its login
    /// (TLS handshake included) this many seconds after it was accepted is closed, so
    /// silent sockets cannot hold the `-c` slots.
    #[arg(long = "sql-connect-timeout-secs", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub sql_connect_timeout_secs: u64,
}

/// The SQL port: a number, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlPort(pub Option<u16>);

fn parse_sql_port(text: &str) -> Result<SqlPort, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(SqlPort(None));
    }
    text.parse::<u16>()
        .map(|p| SqlPort(Some(p)))
        .map_err(|_| format!("{text:?} is neither a port nor `off`"))
}

/// The flags a config file may set: every one but `--help` and `--config`.
fn file_flags() -> Vec<kura_config::Flag> {
    let command = Config::command();
    command
        .get_arguments()
        .filter(|arg| !matches!(arg.get_id().as_str(), "help" | "config"))
        .filter_map(|arg| {
            let kind = match arg.get_action() {
                ArgAction::SetTrue => kura_config::Kind::Switch,
                ArgAction::Count => kura_config::Kind::Count,
                ArgAction::Set | ArgAction::Append => kura_config::Kind::Value,
                _ => return None,
            };
            let (key, spelling) = match (arg.get_long(), arg.get_short()) {
                (Some(long), _) => (long.to_string(), format!("--{long}")),
                (None, Some(short)) => (arg.get_id().to_string(), format!("-{short}")),
                (None, None) => return None,
            };
            Some(kura_config::Flag {
                key,
                spelling,
                kind,
            })
        })
        .collect()
}

/// The `--config FILE` among `args`, if any.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let word = word.to_string_lossy();
        if word == "--config" {
            return words.next().map(PathBuf::from);
        }
        if let Some(path) = word.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    None
}

/// The command line with the config file's settings before its own flags, and the
/// settings (empty without `--config`).
fn with_file(args: &[OsString]) -> anyhow::Result<(Vec<OsString>, Vec<kura_config::Setting>)> {
    let Some(path) = config_path(args) else {
        return Ok((args.to_vec(), Vec::new()));
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the config file {}", path.display()))?;
    let settings = kura_config::to_args(&text, &file_flags())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut full: Vec<OsString> = args.iter().take(1).cloned().collect();
    full.extend(
        settings
            .iter()
            .flat_map(|s| s.args.iter().map(OsString::from)),
    );
    full.extend(args.iter().skip(1).cloned());
    Ok((full, settings))
}

impl Config {
    /// The configuration from `args` (the program's name first) and the file their
    /// `--config` names. A bad flag ends the process with clap's message, as
    /// `Config::parse` does; a bad file is an error naming its line.
    pub fn load(args: &[OsString]) -> anyhow::Result<Config> {
        let (full, _) = with_file(args)?;
        Ok(Config::try_parse_from(full).unwrap_or_else(|e| e.exit()))
    }

    /// `kura config check [flags]`: every setting that results from the file and the
    /// flags, as a config file would say it, and where it came from. No flag holds a
    /// secret (the users files hold the passwords, and only their paths are settings),
    /// so nothing is left out.
    pub fn check(args: &[OsString]) -> anyhow::Result<String> {
        let (full, settings) = with_file(args)?;
        let matches = Config::command()
            .try_get_matches_from(&full)
            .unwrap_or_else(|e| e.exit());
        let own = Config::command()
            .ignore_errors(true)
            .try_get_matches_from(args)
            .ok();
        let path = config_path(args);
        let command = Config::command();
        let mut text = String::new();
        for flag in file_flags() {
            let id = command
                .get_arguments()
                .find(|a| {
                    a.get_long() == Some(flag.key.as_str()) || a.get_id() == flag.key.as_str()
                })
                .map(|a| a.get_id().to_string())
                .unwrap_or_default();
            let value = match flag.kind {
                kura_config::Kind::Switch => matches.get_flag(&id).to_string(),
                kura_config::Kind::Count => matches.get_count(&id).to_string(),
                kura_config::Kind::Value => {
                    match matches.get_raw(&id).and_then(|mut v| v.next_back()) {
                        Some(raw) => toml_value(&raw.to_string_lossy()),
                        None => continue,
                    }
                }
            };
            let from_command_line = own.as_ref().is_some_and(|m| {
                m.value_source(&id) == Some(clap::parser::ValueSource::CommandLine)
            });
            let from_file = settings.iter().find(|s| s.key == flag.key);
            let source = match (from_command_line, from_file, &path) {
                (true, _, _) => "the command line".to_string(),
                (false, Some(setting), Some(path)) => {
                    format!("{}:{}", path.display(), setting.line)
                }
                _ if matches.value_source(&id) == Some(clap::parser::ValueSource::DefaultValue) => {
                    "default".to_string()
                }
                _ => "unset".to_string(),
            };
            text.push_str(&format!("{} = {value}  # {source}\n", flag.key));
        }
        Ok(text)
    }

    /// The TLS settings from the `--ssl-*` flags and memcached's `-o ssl_*=…` keys, or
    /// none when nothing asks for TLS. A setting given both ways must agree.
    pub fn tls_settings(&self) -> anyhow::Result<Option<crate::tls::Settings>> {
        let mut chain_cert = self.ssl_chain_cert.clone();
        let mut key = self.ssl_key.clone();
        let mut ca_cert = self.ssl_ca_cert.clone();
        let mut verify = self.ssl_verify_mode.clone();
        let mut min_version = self.ssl_min_version.clone();
        for option in self.extended.iter().filter(|o| !o.is_empty()) {
            let (name, value) = option.split_once('=').unwrap_or((option.as_str(), ""));
            fn set<T: PartialEq>(slot: &mut Option<T>, value: T, name: &str) -> anyhow::Result<()> {
                match slot {
                    Some(old) if *old != value => {
                        anyhow::bail!("-o {name} disagrees with --{}", name.replace('_', "-"))
                    }
                    _ => *slot = Some(value),
                }
                Ok(())
            }
            anyhow::ensure!(!value.is_empty(), "-o {name} needs a value ({name}=…)");
            match name {
                "ssl_chain_cert" => set(&mut chain_cert, PathBuf::from(value), name)?,
                "ssl_key" => set(&mut key, PathBuf::from(value), name)?,
                "ssl_ca_cert" => set(&mut ca_cert, PathBuf::from(value), name)?,
                "ssl_verify_mode" => set(&mut verify, value.to_string(), name)?,
                "ssl_min_version" => set(&mut min_version, value.to_string(), name)?,
                "ssl_ciphers" | "ssl_keyformat" | "ssl_wbuf_size" | "ssl_session_cache"
                | "ssl_kernel_tls" => anyhow::bail!(
                    "-o {name}: not a Kura setting (rustls chooses its cipher suites, reads PEM keys only and sizes its own buffers)"
                ),
                _ => anyhow::bail!(
                    "-o {name}: Kura's -o takes memcached's TLS keys only (ssl_chain_cert, ssl_key, ssl_ca_cert, ssl_verify_mode, ssl_min_version)"
                ),
            }
        }
        if !self.enable_ssl && !self.tls_replication {
            anyhow::ensure!(
                chain_cert.is_none()
                    && key.is_none()
                    && ca_cert.is_none()
                    && verify.is_none()
                    && min_version.is_none(),
                "TLS settings without -Z or --tls-replication would be ignored: give -Z to serve TLS"
            );
            return Ok(None);
        }
        let verify = crate::tls::Verify::parse(verify.as_deref().unwrap_or("0"))
            .map_err(anyhow::Error::msg)?;
        let min_version = crate::tls::MinVersion::parse(min_version.as_deref().unwrap_or("2"))
            .map_err(anyhow::Error::msg)?;
        Ok(Some(crate::tls::Settings {
            chain_cert,
            key,
            ca_cert,
            verify,
            min_version,
        }))
    }

    pub fn fsync_interval(&self) -> Duration {
        Duration::from_millis(self.fsync_interval_ms.max(1))
    }
}

/// A command-line value as a TOML value: a bare integer, or a quoted string.
fn toml_value(raw: &str) -> String {
    if raw.parse::<i64>().is_ok() {
        return raw.to_string();
    }
    let mut quoted = String::with_capacity(raw.len() + 2);
    quoted.push('"');
    for c in raw.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04x}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// Parses memcached's size syntax: `1048576`, `512k`, `2m`.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, multiplier) = match text.as_bytes().last() {
        Some(b'k' | b'K') => (&text[..text.len() - 1], 1024),
        Some(b'm' | b'M') => (&text[..text.len() - 1], 1024 * 1024),
        _ => (text, 1),
    };
    let n: usize = digits.parse().map_err(|_| format!("not a size: {text}"))?;
    let bytes = n
        .checked_mul(multiplier)
        .ok_or_else(|| format!("too large: {text}"))?;
    if !(1024..=(1 << 30)).contains(&bytes) {
        return Err(format!(
            "item size must be between 1k and 1024m, not {text}"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<usize, ()>) {
        assert_eq!(parse_size(text).map_err(|_| ()), expected, "{text}");
    }

    #[test]
    fn sizes_parse_as_memcached_reads_them() {
        check("1m", Ok(1 << 20));
        check("512k", Ok(512 << 10));
        check("2M", Ok(2 << 20));
        check("4096", Ok(4096));
        check("12", Err(()));
        check("2g", Err(()));
        check("", Err(()));
    }
}
