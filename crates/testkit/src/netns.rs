//! Network namespaces for tests of what crosses a network: a namespace linked to this
//! one by a veth pair, a link that can be cut and restored, and threads that work
//! inside it. Needs root and iproute2's `ip`.

use std::process::Command;

/// A network namespace with a veth pair to this one: `inside` is the namespace's end
/// of the link, `outside` this namespace's. Removed on drop.
pub struct NetNamespace {
    pub name: String,
    outside_link: String,
    /// The address of this namespace's end of the link.
    pub outside: String,
    /// The address of the namespace's end.
    pub inside: String,
}

fn ip(arguments: &[&str]) {
    let output = Command::new("ip")
        .args(arguments)
        .output()
        .unwrap_or_else(|e| panic!("ip {arguments:?}: {e} (iproute2 is needed)"));
    assert!(
        output.status.success(),
        "ip {arguments:?}: {} (network namespaces need root)",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl NetNamespace {
    /// A new namespace, named after `tag` and this process, linked to this one.
    pub fn create(tag: &str) -> NetNamespace {
        let pid = std::process::id();
        let name = format!("kura-{tag}-{pid}");
        let (outside_link, inside_link) = (format!("kpa{pid}"), format!("kpb{pid}"));
        let net = format!("10.231.{}", pid % 250 + 1);
        let (outside, inside) = (format!("{net}.1"), format!("{net}.2"));
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let ns = NetNamespace {
            name,
            outside_link,
            outside,
            inside,
        };
        ip(&[
            "link",
            "add",
            &ns.outside_link,
            "type",
            "veth",
            "peer",
            "name",
            &inside_link,
        ]);
        ip(&["link", "set", &inside_link, "netns", &ns.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", ns.outside),
            "dev",
            &ns.outside_link,
        ]);
        ip(&["link", "set", &ns.outside_link, "up"]);
        let inside_cidr = format!("{}/24", ns.inside);
        for command in [
            vec!["addr", "add", &inside_cidr, "dev", &inside_link],
            vec!["link", "set", &inside_link, "up"],
            vec!["link", "set", "lo", "up"],
        ] {
            let mut arguments = vec!["netns", "exec", &ns.name, "ip"];
            arguments.extend(command);
            ip(&arguments);
        }
        ns
    }

    /// Cuts (false) or restores (true) the link between the namespaces.
    pub fn link_up(&self, up: bool) {
        ip(&[
            "link",
            "set",
            &self.outside_link,
            if up { "up" } else { "down" },
        ]);
    }

    /// Runs `work` on a thread inside the namespace.
    pub fn run_inside<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: setns(2) on a namespace file this thread holds open; it moves
            // only this thread, which creates its sockets after.
            #[allow(unsafe_code)]
            let moved =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
            assert_eq!(moved, 0, "setns: {}", std::io::Error::last_os_error());
            work()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

impl Drop for NetNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
