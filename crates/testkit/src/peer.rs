//! What the private peers (MariaDB, etcd) share: a data directory of their own on a
//! real disk, and a loopback port found free.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;

use crate::assert_not_tmpfs;

/// A fresh temporary directory under `dir`, named with `prefix`, on a real disk (not
/// tmpfs, where fsync does nothing). Panics when it cannot make one.
pub(crate) fn private_dir(dir: &Path, prefix: &str) -> tempfile::TempDir {
    let dir = match tempfile::Builder::new().prefix(prefix).tempdir_in(dir) {
        Ok(dir) => dir,
        Err(e) => panic!("temporary directory: {e}"),
    };
    assert_not_tmpfs(dir.path());
    dir
}

/// A loopback port free a moment ago (another process may take it meanwhile).
pub fn free_port() -> u16 {
    match TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(e) => panic!("finding a free port: {e}"),
    }
}
