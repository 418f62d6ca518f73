//! `kura backup`, `kura backup verify` and `kura restore`: a consistent copy of a
//! running primary, taken while it serves, and a node started from one.
//!
//! A backup is a replica that stops. It asks the primary where its log ends (`log_lsn`
//! of `stats replication`), which is past every change the primary has acknowledged
//! whatever its durability mode; then it opens a replica's store in the backup's
//! directory and runs the replica's session (`replication::replica::session`) with the
//! `backup` marker, so the primary neither counts it toward `--min-sync-replicas` nor
//! lists it as a replica, until its log holds the primary's up to at least that point
//! (a full copy from the primary's oldest segment, then the log after it: records
//! copied unchanged, with their LSNs, flags, CAS and exptimes). The copy is synced,
//! given an index checkpoint and closed, and `MANIFEST` (`backup/manifest.rs`) lists
//! every file with its size and CRC-32C.
//!
//! Verify checks the manifest, every file it lists, and the log's records (each
//! record's CRC, the segments following one another up to the point).
//!
//! Restore checks the backup as verify does, copies the files (syncing each file and the
//! directory), opens the store and begins a new epoch at the backup's point, as a
//! promotion does: the restored node is a primary whose history parts from the
//! original's continuing one there, so neither is ever taken for a prefix of the other
//! past that point.
//!
//! What it is not for: scheduling, retention or shipping backups elsewhere.

mod manifest;
mod records;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use kura_engine::{Durability, History, Options, Store, SystemClock};
use kura_tables::Tables;

use crate::replication::primary::Purpose;
use crate::replication::replica::{self, LinkState, Session};
use manifest::Manifest;

/// How many times a backup connects to the primary before it gives up: a dropped
/// link goes on from where the copy got to.
const ATTEMPTS: usize = 5;
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long the primary may take to answer `stats replication`.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// The space the backup's and the restore's stores reserve ahead in the segment they
/// write: little, so a backup is not padded to a whole segment (the node started on
/// a restored directory reserves its own `--segment-size-mib`).
const RESERVE_BYTES: u64 = 1 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "kura backup",
    about = "Copies a running primary's data into an empty directory, consistently, while it serves; `kura backup verify DIR` checks a backup"
)]
struct BackupFlags {
    /// The primary's memcached port, host:port.
    #[arg(long, value_name = "HOST:PORT")]
    from: String,
    /// The backup's directory: created, or empty.
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// A file with one user:password line, sent as a text login when the primary has
    /// a users file (-Y), as a replica's --replication-login.
    #[arg(long = "replication-login", value_name = "FILE")]
    replication_login: Option<PathBuf>,
    /// Connect with TLS (a primary with -Z), checking its certificate against these
    /// CAs (PEM) for the host of --from.
    #[arg(long = "ssl-ca-cert", value_name = "FILE")]
    ssl_ca_cert: Option<PathBuf>,
    /// A client certificate chain (PEM) to show a primary that requires one.
    #[arg(long = "ssl-chain-cert", value_name = "FILE", requires = "ssl_ca_cert")]
    ssl_chain_cert: Option<PathBuf>,
    /// Its private key (PEM); without it, read from the chain file.
    #[arg(long = "ssl-key", value_name = "FILE", requires = "ssl_chain_cert")]
    ssl_key: Option<PathBuf>,
}

impl BackupFlags {
    /// TLS toward the primary, when a CA to check it against was given.
    fn tls(&self) -> anyhow::Result<Option<crate::tls::Settings>> {
        let Some(ca_cert) = &self.ssl_ca_cert else {
            return Ok(None);
        };
        let settings = crate::tls::Settings {
            chain_cert: self.ssl_chain_cert.clone(),
            key: self.ssl_key.clone(),
            ca_cert: Some(ca_cert.clone()),
            verify: crate::tls::Verify::None,
            min_version: crate::tls::MinVersion::Tls12,
        };
        // The files are read now, so a bad one is named before anything is copied.
        settings.client_config().map_err(anyhow::Error::msg)?;
        Ok(Some(settings))
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "kura backup verify",
    about = "Checks a backup: its manifest's checksum, every file's size and CRC-32C, no file it does not list"
)]
struct VerifyFlags {
    /// The backup's directory.
    dir: PathBuf,
}

#[derive(Parser, Debug)]
#[command(
    name = "kura restore",
    about = "Makes a data directory from a backup (checked first); `kura --data-dir DIR` starts it as a primary"
)]
struct RestoreFlags {
    /// The backup's directory.
    #[arg(long, value_name = "BACKUP")]
    from: PathBuf,
    /// The new data directory: created, or empty.
    #[arg(long, value_name = "DATADIR")]
    to: PathBuf,
}

/// Runs `kura backup …`, `kura backup verify …` or `kura restore …` if `args` (the
/// whole command line) names one; None if it names none of them.
pub fn command(args: &[OsString]) -> Option<anyhow::Result<()>> {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    // clap reads the first argument it is given as the program's name.
    let flags = |skip: usize| args.iter().skip(skip).cloned().collect::<Vec<_>>();
    match (word(1), word(2)) {
        (Some("backup"), Some("verify")) => Some(verify(VerifyFlags::parse_from(flags(2)))),
        (Some("backup"), _) => Some(backup(BackupFlags::parse_from(flags(1)))),
        (Some("restore"), _) => Some(restore(RestoreFlags::parse_from(flags(1)))),
        _ => None,
    }
}

fn backup(flags: BackupFlags) -> anyhow::Result<()> {
    let login = flags
        .replication_login
        .as_deref()
        .map(crate::auth::login_from_file)
        .transpose()?;
    let tls = flags.tls()?;
    let (from, dir) = (flags.from.as_str(), flags.to.as_path());
    // Checked before anything is asked of the primary, made only once it answered.
    refuse_unless_empty(dir)?;
    let tls = tls
        .as_ref()
        .map(|t| t as &dyn crate::replication::ClientTls);
    let wanted = log_end(from, login.as_deref(), tls)?;
    make_empty_dir(dir)?;
    let (point_lsn, history) = copy_log(from, dir, login.as_deref(), tls, wanted)?;
    let manifest = Manifest {
        history_id: history.id,
        epoch: history.current().number,
        point_lsn,
        source: from.to_string(),
        created_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        files: manifest::take(dir).with_context(|| format!("reading {}", dir.display()))?,
    };
    write_durably(dir, manifest::FILE, manifest.encode().as_bytes())?;
    // Read back what was written, as verify and restore will.
    if let Err(problems) = check(dir) {
        bail!("{}", damaged(dir, &problems));
    }
    let bytes: u64 = manifest.files.iter().map(|e| e.size_bytes).sum();
    println!("backup point {point_lsn}");
    println!(
        "backed up {from} (history {:032x}, epoch {}) into {}: {} files, {bytes} bytes, \
         every change up to LSN {point_lsn} (asked for {wanted})",
        manifest.history_id,
        manifest.epoch,
        dir.display(),
        manifest.files.len()
    );
    Ok(())
}

/// Refuses `dir` unless it is an empty directory or does not exist.
fn refuse_unless_empty(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!("{} is not empty", dir.display());
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("reading {}", dir.display())),
    }
}

/// Creates `dir`, or checks that it is an empty directory.
fn make_empty_dir(dir: &Path) -> anyhow::Result<()> {
    refuse_unless_empty(dir)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// The primary's log end (`log_lsn` of `stats replication`): every change it has
/// acknowledged lies at or below it.
fn log_end(
    from: &str,
    login: Option<&[u8]>,
    tls: Option<&dyn crate::replication::ClientTls>,
) -> anyhow::Result<u64> {
    let mut stream = crate::replication::connect(from, tls)
        .map_err(|e| anyhow::anyhow!("connecting to {from}: {e}"))?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    crate::replication::log_in(&mut stream, login)?;
    stream.write_all(b"stats replication\r\n")?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        let n = stream
            .read(&mut chunk)
            .with_context(|| format!("reading stats replication from {from}"))?;
        reply.extend_from_slice(&chunk[..n]);
        // Stats come as STAT lines; any other line (a refusal, a login wanted) ends it.
        let refused = reply
            .split_inclusive(|&b| b == b'\n')
            .next()
            .filter(|line| line.ends_with(b"\r\n"))
            .is_some_and(|line| !line.starts_with(b"STAT ") && line != b"END\r\n");
        if n == 0 || refused || reply.len() > 1 << 20 {
            bail!(
                "{from} did not answer stats replication: {}",
                String::from_utf8_lossy(&reply).trim_end()
            );
        }
    }
    let reply = String::from_utf8_lossy(&reply);
    let stat = |name: &str| {
        reply
            .lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
    };
    match stat("role") {
        Some("primary") => {}
        Some(role) => bail!("{from} is a {role}: back up its primary"),
        None => bail!("{from} did not say its role; is it Kura?"),
    }
    stat("log_lsn")
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{from} did not say where its log ends"))
}

/// Copies the primary's log into a replica's store in `dir` until it holds everything
/// up to `wanted`, then syncs it, writes its index checkpoint and closes it. Returns
/// where the copied log ends and its history.
fn copy_log(
    from: &str,
    dir: &Path,
    login: Option<&[u8]>,
    tls: Option<&dyn crate::replication::ClientTls>,
    wanted: u64,
) -> anyhow::Result<(u64, History)> {
    let mut options = Options::new(Durability::Fsync, Arc::new(SystemClock));
    options.segment_size_bytes = RESERVE_BYTES;
    options.read_only = Some(from.to_string());
    let synced = Arc::new(crate::replication::Synced::new());
    options.on_synced = Some(Arc::new({
        let synced = Arc::clone(&synced);
        move |lsn| synced.publish(lsn)
    }));
    let store = Arc::new(
        Store::open_dir(dir, options).with_context(|| format!("opening {}", dir.display()))?,
    );
    let tables = Arc::new(Tables::open(Arc::clone(&store))?);
    let copying = Session {
        tables: &tables,
        login,
        tls,
        purpose: Purpose::Backup,
        until_lsn: Some(wanted),
        synced: &synced,
    };
    let state = Arc::new(LinkState::default());
    let stop = replica::Stop::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    // With `stop` never told, a session ends well only once the copy holds `wanted`;
    // another goes on from where the copy got to.
    let mut failures = Vec::new();
    while let Err(e) = runtime.block_on(replica::session(&copying, from, &stop, &state)) {
        eprintln!("kura backup: {from}: {e}");
        failures.push(e.to_string());
        if failures.len() == ATTEMPTS {
            bail!("copying from {from}: {}", failures.join("; "));
        }
        std::thread::sleep(RETRY_AFTER);
    }
    let end = store.appended_lsn();
    store.sync_through(end)?;
    store.checkpoint()?;
    let history = store.history();
    store.shutdown();
    Ok((end, history))
}

/// The whole check of a backup: the manifest and every file it lists
/// (`manifest.rs`), then the log's records (`records.rs`).
fn check(dir: &Path) -> Result<Manifest, Vec<String>> {
    let manifest = manifest::verify(dir)?;
    let problems = records::check(dir, &manifest);
    if problems.is_empty() {
        Ok(manifest)
    } else {
        Err(problems)
    }
}

fn verify(flags: VerifyFlags) -> anyhow::Result<()> {
    let dir = flags.dir.as_path();
    match check(dir) {
        Ok(manifest) => {
            println!(
                "{} is whole: {} files, every change up to LSN {} of history {:032x}",
                dir.display(),
                manifest.files.len(),
                manifest.point_lsn,
                manifest.history_id
            );
            Ok(())
        }
        Err(problems) => bail!(damaged(dir, &problems)),
    }
}

fn damaged(dir: &Path, problems: &[String]) -> String {
    format!(
        "the backup in {} is damaged:\n  {}",
        dir.display(),
        problems.join("\n  ")
    )
}

fn restore(flags: RestoreFlags) -> anyhow::Result<()> {
    let (from, to) = (flags.from.as_path(), flags.to.as_path());
    let manifest = check(from)
        .map_err(|problems| anyhow::anyhow!("{}; not restoring", damaged(from, &problems)))?;
    make_empty_dir(to)?;
    for entry in &manifest.files {
        copy_checked(&from.join(&entry.name), &to.join(&entry.name), entry)?;
    }
    sync_dir(to)?;
    let mut options = Options::new(Durability::Fsync, Arc::new(SystemClock));
    options.segment_size_bytes = RESERVE_BYTES;
    let store =
        Store::open_dir(to, options).with_context(|| format!("opening {}", to.display()))?;
    let (end, history) = (store.appended_lsn(), store.history());
    if end != manifest.point_lsn || history.id != manifest.history_id {
        bail!(
            "the restored log ends at LSN {end} of history {:032x}, the manifest says LSN {} of {:032x}",
            history.id,
            manifest.point_lsn,
            manifest.history_id
        );
    }
    // A promotion's new epoch: this node's history parts from the original's here.
    let epoch = store.begin_epoch()?;
    store.shutdown();
    println!(
        "restored {} into {}: every change up to LSN {end}; epoch {} of history {:032x} begins there",
        from.display(),
        to.display(),
        epoch.number,
        history.id
    );
    Ok(())
}

/// Copies `from` to `to` and syncs it, checking what it read against the manifest's
/// `entry` (the file could change after it was verified).
fn copy_checked(from: &Path, to: &Path, entry: &manifest::Entry) -> anyhow::Result<()> {
    let mut input = std::fs::File::open(from).with_context(|| format!("{}", from.display()))?;
    let mut output = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .with_context(|| format!("creating {}", to.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut size, mut crc) = (0u64, 0u32);
    loop {
        let n = input
            .read(&mut buf)
            .with_context(|| format!("{}", from.display()))?;
        if n == 0 {
            break;
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        size += n as u64;
        output
            .write_all(&buf[..n])
            .with_context(|| format!("writing {}", to.display()))?;
    }
    if (size, crc) != (entry.size_bytes, entry.crc32c) {
        bail!("{} changed while it was restored", from.display());
    }
    output
        .sync_all()
        .with_context(|| format!("syncing {}", to.display()))
}

/// Writes `dir/name` whole or not at all: aside, synced, renamed, the directory synced.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    let temp = dir.join(format!("{name}.tmp"));
    let mut file =
        std::fs::File::create(&temp).with_context(|| format!("creating {}", temp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temp, dir.join(name))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}
