//! Memory cgroups: a hard memory limit, page cache included, around a server.
//!
//! The data-size workload measures servers whose data is from half to ten times
//! the memory they may use. A cgroup makes that limit real without a smaller
//! machine: every page a server touches, anonymous or page cache (its files, its
//! log), is charged to its cgroup, and past the limit the kernel reclaims the
//! cgroup's page cache or, if that is not enough, kills a process in it (the
//! report then says "OOM (killed)" for that cell).
//!
//! Both cgroup versions are handled. Version 1 (a `cgroup` mount with the
//! `memory` controller, e.g. `/sys/fs/cgroup/memory`): a child directory with
//! `memory.limit_in_bytes`. Version 2 (a `cgroup2` mount whose root lists
//! `memory` in `cgroup.controllers`, e.g. `/sys/fs/cgroup`): `+memory` enabled in
//! the root's `cgroup.subtree_control` if it is not already, a child with
//! `memory.max`, and `memory.swap.max` 0 where swap accounting exists, so a limit
//! cannot be dodged by swapping. Where v1 holds the memory controller (a hybrid
//! mount, as on the development machine) v1 is used.
//!
//! Creating cgroups needs root (or a delegated subtree). A cgroup is removed when
//! its [`MemoryCgroup`] is dropped, after its servers have been stopped; an
//! interrupted run removes them from the signal handler (see `backend.rs`).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Cgroups created by this process and not yet removed, for the signal handler.
static CREATED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Which cgroup interface holds the memory controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Where memory cgroups can be made on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub version: Version,
    /// The directory new cgroups are made in.
    pub root: PathBuf,
}

impl Hierarchy {
    /// Finds the memory controller from `/proc/mounts`.
    pub fn detect() -> Result<Hierarchy> {
        let mounts = fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
        Hierarchy::from_mounts(&mounts, |root| {
            fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default()
        })
        .context(
            "no memory cgroup controller is mounted (neither a cgroup v1 hierarchy with \
             `memory` nor cgroup v2 listing `memory` in cgroup.controllers): the data-size \
             workload needs one to limit each server's memory",
        )
    }

    /// The hierarchy `mounts` (the text of `/proc/mounts`) offers; `controllers`
    /// reads a v2 root's `cgroup.controllers`.
    fn from_mounts(mounts: &str, controllers: impl Fn(&Path) -> String) -> Option<Hierarchy> {
        let entries: Vec<Vec<&str>> = mounts
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|f| f.len() >= 4)
            .collect();
        let v1 = entries
            .iter()
            .find(|f| f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory"));
        if let Some(f) = v1 {
            return Some(Hierarchy {
                version: Version::V1,
                root: PathBuf::from(f[1]),
            });
        }
        entries
            .iter()
            .filter(|f| f[2] == "cgroup2")
            .map(|f| PathBuf::from(f[1]))
            .find(|root| controllers(root).split_whitespace().any(|c| c == "memory"))
            .map(|root| Hierarchy {
                version: Version::V2,
                root,
            })
    }

    /// `cgroup v1, memory controller at /sys/fs/cgroup/memory`.
    pub fn describe(&self) -> String {
        match self.version {
            Version::V1 => format!(
                "cgroup v1, memory controller at {} (memory.limit_in_bytes)",
                self.root.display()
            ),
            Version::V2 => format!(
                "cgroup v2 at {} (memory.max, memory.swap.max 0)",
                self.root.display()
            ),
        }
    }
}

/// A cgroup with a memory limit, removed on drop.
#[derive(Debug)]
pub struct MemoryCgroup {
    path: PathBuf,
    version: Version,
}

impl MemoryCgroup {
    /// Creates `<root>/<name>` with a memory limit of `limit_bytes`.
    pub fn create(hierarchy: &Hierarchy, name: &str, limit_bytes: u64) -> Result<MemoryCgroup> {
        let refused = |what: &str, e: &std::io::Error| {
            format!(
                "cannot {what}: {e}. kura-bench puts each server of the data-size workload \
                 in a memory cgroup, which needs root (or a delegated cgroup subtree) and a \
                 writable cgroup filesystem ({})",
                hierarchy.describe()
            )
        };
        if hierarchy.version == Version::V2 {
            let control = hierarchy.root.join("cgroup.subtree_control");
            let enabled = fs::read_to_string(&control).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                fs::write(&control, "+memory").map_err(|e| {
                    anyhow::anyhow!(refused(
                        &format!("enable +memory in {}", control.display()),
                        &e
                    ))
                })?;
            }
        }
        let path = hierarchy.root.join(name);
        if path.exists() {
            // Left by a run that was killed outright; empty, or removal fails below.
            let _ = fs::remove_dir(&path);
        }
        fs::create_dir(&path)
            .map_err(|e| anyhow::anyhow!(refused(&format!("create {}", path.display()), &e)))?;
        if let Ok(mut created) = CREATED.lock() {
            created.push(path.clone());
        }
        let cgroup = MemoryCgroup {
            path,
            version: hierarchy.version,
        };
        match cgroup.version {
            Version::V1 => cgroup.write("memory.limit_in_bytes", &limit_bytes.to_string())?,
            Version::V2 => {
                cgroup.write("memory.max", &limit_bytes.to_string())?;
                if cgroup.path.join("memory.swap.max").exists() {
                    cgroup.write("memory.swap.max", "0")?;
                }
            }
        }
        // The kernel rounds the limit to pages; it must not have refused it.
        let set = cgroup
            .limit_set()
            .context("reading back the memory limit")?;
        assert!(
            set <= limit_bytes && set + 4096 * 16 >= limit_bytes,
            "cgroup limit {set} set for {limit_bytes}"
        );
        Ok(cgroup)
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.path.join(file);
        fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn limit_set(&self) -> Option<u64> {
        match self.version {
            Version::V1 => self.read_u64("memory.limit_in_bytes"),
            Version::V2 => self.read_u64("memory.max"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file a process joins the cgroup through.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// Whether `pid` is in this cgroup.
    pub fn contains(&self, pid: u32) -> bool {
        fs::read_to_string(self.procs_file())
            .map(|text| text.lines().any(|l| l.trim() == pid.to_string()))
            .unwrap_or(false)
    }

    /// Moves `pid` (all its threads) into this cgroup. Memory it already holds stays
    /// charged where it was: start servers inside instead where possible.
    pub fn add(&self, pid: u32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Bytes charged now: the processes' memory and page cache.
    pub fn usage_bytes(&self) -> Option<u64> {
        match self.version {
            Version::V1 => self.read_u64("memory.usage_in_bytes"),
            Version::V2 => self.read_u64("memory.current"),
        }
    }

    /// The most bytes ever charged (v2 kernels before 5.19 have no `memory.peak`).
    pub fn peak_bytes(&self) -> Option<u64> {
        match self.version {
            Version::V1 => self.read_u64("memory.max_usage_in_bytes"),
            Version::V2 => self.read_u64("memory.peak"),
        }
    }

    /// Processes the kernel's OOM killer killed in this cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = fs::read_to_string(self.path.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if remove(&self.path).is_ok() {
            if let Ok(mut created) = CREATED.lock() {
                created.retain(|p| p != &self.path);
            }
        } else {
            eprintln!(
                "warning: could not remove cgroup {} (a process is still in it?)",
                self.path.display()
            );
        }
    }
}

/// Removes an empty cgroup, waiting up to two seconds for killed processes to
/// leave it.
fn remove(path: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                bail!("removing cgroup {}: {e}", path.display())
            }
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Removes every cgroup this process made and still holds: for the signal
/// handler, after it has killed the servers.
pub fn remove_all() {
    let paths = CREATED.lock().map(|c| c.clone()).unwrap_or_default();
    for path in paths {
        let _ = remove(&path);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn detects_either_version() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
                      cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        let none = |_: &Path| String::new();
        assert_eq!(
            Hierarchy::from_mounts(hybrid, none),
            Some(Hierarchy {
                version: Version::V1,
                root: PathBuf::from("/sys/fs/cgroup/memory")
            })
        );
        let unified = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
        let with_memory = |_: &Path| "cpuset cpu io memory pids\n".to_string();
        assert_eq!(
            Hierarchy::from_mounts(unified, with_memory),
            Some(Hierarchy {
                version: Version::V2,
                root: PathBuf::from("/sys/fs/cgroup")
            })
        );
        assert_eq!(Hierarchy::from_mounts(unified, none), None);
        // cpu's "memory"-less options must not match, nor a "memory_x" option.
        let cpu_only = "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu,memory_pressure 0 0\n";
        assert_eq!(Hierarchy::from_mounts(cpu_only, none), None);
    }

    #[test]
    fn a_cgroup_limits_and_is_removed() {
        // Runs where cgroups can be made (CI and the development machine run as
        // root); elsewhere it says why it checked nothing.
        let Ok(hierarchy) = Hierarchy::detect() else {
            eprintln!("NOTE: no memory cgroup controller mounted: cgroup test skipped");
            return;
        };
        let name = format!("kura-bench-unit-{}", std::process::id());
        let cgroup = match MemoryCgroup::create(&hierarchy, &name, 64 << 20) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("NOTE: cannot create cgroups here ({e:#}): cgroup test skipped");
                return;
            }
        };
        assert_eq!(cgroup.limit_set(), Some(64 << 20));
        assert_eq!(cgroup.oom_kills(), Some(0));
        assert!(cgroup.usage_bytes().is_some());
        let path = cgroup.path().to_path_buf();
        assert!(path.is_dir());
        drop(cgroup);
        assert!(!path.exists());
    }
}
