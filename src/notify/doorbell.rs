//! The doorbell: how a completion queue ([`super::Notifier`]) rings its loop when it goes from
//! empty to non-empty. [`Doorbell`] is the ringing side, an eventfd (luv and cqueues poll it) or a
//! connected socket; [`DoorbellListener`] is how a loop that can only wait on sockets it connected
//! itself (OpenResty's cosockets) gets the socket: a listener in a private directory that the
//! loop connects to once.
//!
//! The loop's side of the connection belongs to the event loop; this side is the doorbell that
//! [`Notifier::push`](super::Notifier::push) writes to. The listener lives only between `bind` and
//! `accept` (microseconds, in the same process); its directory is created with mode 0700, so
//! other users cannot connect, and on Linux the peer's pid is checked, so other processes of the
//! same user cannot slip in either (elsewhere only the peer's user is: `sys::peer_is_this_process`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Names of the private directories: unique per process and call.
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

pub struct DoorbellListener {
    listener: UnixListener,
    dir: PathBuf,
    path: PathBuf,
}

impl DoorbellListener {
    /// Binds a listening socket at `<parent>/vmpool-<pid>-<n>/bell`.
    pub fn bind(parent: &Path) -> io::Result<DoorbellListener> {
        let pid = std::process::id();
        let dir = loop {
            let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
            let dir = parent.join(format!("vmpool-{pid}-{n}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => break dir,
                // left behind by a killed process that had the same pid: take the next name
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        };
        let path = dir.join("bell");
        let listener = match UnixListener::bind(&path).and_then(|l| {
            l.set_nonblocking(true)?;
            Ok(l)
        }) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        Ok(DoorbellListener {
            listener,
            dir,
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the connection this process made to the listener (it is already queued: a unix
    /// socket `connect` completes as soon as the listener's backlog has room). Connections from
    /// other processes are closed. Fails with `WouldBlock` if none of ours is queued.
    pub fn accept(&self) -> io::Result<OwnedFd> {
        loop {
            let (stream, _) = self.listener.accept()?;
            if crate::sys::peer_is_this_process(stream.as_raw_fd())? {
                stream.set_nonblocking(true)?;
                crate::sys::no_sigpipe(stream.as_raw_fd())?;
                return Ok(OwnedFd::from(stream));
            }
        }
    }
}

impl Drop for DoorbellListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// How a notifier rings when its queue goes from empty to non-empty.
pub enum Doorbell {
    /// A descriptor the loop polls (an eventfd on Linux, a pipe elsewhere: `sys::WakeFd`).
    Wake(crate::sys::WakeFd),
    /// A connected stream socket (non-blocking): write one byte.
    Socket(OwnedFd),
}

impl Doorbell {
    pub(super) fn ring(&self) {
        match self {
            Doorbell::Wake(w) => w.signal(),
            Doorbell::Socket(fd) => send_byte(fd.as_raw_fd()),
        }
    }

    /// Called when the queue is drained (also after `Notifier::wake`, which rings without a token):
    /// an eventfd is polled level-triggered by the loop itself (luv, cqueues), so it is read back
    /// to zero here; otherwise it would stay readable and the
    /// loop would spin. A socket's bytes are read by the loop that owns its other end.
    pub(super) fn quiet(&self) {
        if let Doorbell::Wake(w) = self {
            w.reset();
        }
    }
}

fn send_byte(fd: RawFd) {
    loop {
        let n = crate::sys::send_byte(fd);
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // EAGAIN: the socket buffer is full of unread rings; EPIPE: nobody listens any more.
            return;
        }
    }
}
