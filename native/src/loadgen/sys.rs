//! Thin, safe wrappers over the Linux calls the load generator needs.
//!
//! Design: the engine talks to the kernel directly (epoll, non-blocking
//! sockets, `clock_gettime`) the way wrk does, instead of through an async
//! runtime: one request then costs one `write`, one `read` and a share of one
//! `epoll_pwait2`, with no task wake-ups or extra buffering in between. Only
//! this file contains `unsafe`; every function returns `io::Result` and owns
//! its file descriptors through `OwnedFd`, so a socket can never leak.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Seconds → nanoseconds.
pub const NS_PER_S: f64 = 1e9;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; these clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of Python's `time.monotonic()`.
#[inline]
pub fn mono_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time consumed by the calling thread, in nanoseconds.
#[inline]
pub fn thread_cpu_ns() -> i64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Asks the kernel to fire this thread's timers within 1 µs of their deadline
/// (the default slack of 50 µs would blur sub-millisecond think times).
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Sets the calling thread's nice value; false if not permitted (needs CAP_SYS_NICE to
/// go below 0).
pub fn set_thread_nice(nice: i32) -> bool {
    // SAFETY: gettid has no arguments; setpriority on our own thread id only affects it.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0
    }
}

/// Puts the calling thread in the real-time FIFO class at the lowest real-time priority
/// (`false` if not permitted), or back in the normal class.
pub fn set_thread_realtime(on: bool) -> bool {
    let param = libc::sched_param {
        sched_priority: i32::from(on),
    };
    let policy = if on {
        libc::SCHED_FIFO
    } else {
        libc::SCHED_OTHER
    };
    // SAFETY: pid 0 is the calling thread; `param` is valid for the call.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// Raises the soft limit on open files to the hard limit; returns the new soft limit.
pub fn raise_open_files_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

/// Busy and total jiffies of the whole machine (first line of /proc/stat).
pub fn machine_cpu_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 4 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait are not busy.
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

// ---- epoll ----------------------------------------------------------------------------------

/// Interest in readability.
pub const READ: u32 = libc::EPOLLIN as u32 | libc::EPOLLRDHUP as u32;
/// Interest in writability.
pub const WRITE: u32 = libc::EPOLLOUT as u32;
/// Edge-triggered delivery.
pub const EDGE: u32 = libc::EPOLLET as u32;

/// An epoll instance.
pub struct Poller {
    fd: OwnedFd,
}

/// Whether the kernel lacks `epoll_pwait2` (before Linux 5.11): then waits are
/// rounded up to whole milliseconds.
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

/// One readiness event.
pub type Event = libc::epoll_event;

/// An empty event buffer entry.
pub fn empty_event() -> Event {
    libc::epoll_event { events: 0, u64: 0 }
}

/// Token carried by an event.
#[inline]
pub fn event_token(e: &Event) -> u64 {
    e.u64
}

/// Flags of an event.
#[inline]
pub fn event_flags(e: &Event) -> u32 {
    e.events
}

/// Whether the event reports an error or hang-up.
#[inline]
pub fn is_error(flags: u32) -> bool {
    flags & (libc::EPOLLERR as u32 | libc::EPOLLHUP as u32) != 0
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: plain syscall; on success we own the returned descriptor.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Poller {
            // SAFETY: `fd` was just returned by epoll_create1 and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, flags: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: flags,
            u64: token,
        };
        // SAFETY: `ev` is valid for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// Registers `fd` with `token`.
    pub fn add(&self, fd: RawFd, token: u64, flags: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, flags)
    }

    /// Changes the interest of a registered `fd`.
    pub fn modify(&self, fd: RawFd, token: u64, flags: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, flags)
    }

    /// Waits for events; `timeout_ns` of `None` waits forever. Nanosecond
    /// timeouts use `epoll_pwait2`, so a timer can fire within microseconds.
    pub fn wait(&self, events: &mut [Event], timeout_ns: Option<i64>) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        if !NO_PWAIT2.load(Ordering::Relaxed) {
            let ts = timeout_ns.map(|ns| {
                let ns = ns.max(0);
                libc::timespec {
                    tv_sec: ns / 1_000_000_000,
                    tv_nsec: ns % 1_000_000_000,
                }
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: `events` is a valid buffer of `max` entries; `ts_ptr` is null or
            // points to a live timespec; no signal mask is passed.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    events.as_mut_ptr(),
                    max,
                    ts_ptr,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => return Ok(0),
                Some(libc::ENOSYS) => NO_PWAIT2.store(true, Ordering::Relaxed),
                _ => return Err(err),
            }
        }
        let ms = match timeout_ns {
            None => -1,
            Some(ns) => ((ns.max(0) + 999_999) / 1_000_000).min(i32::MAX as i64) as libc::c_int,
        };
        // SAFETY: `events` is a valid buffer of `max` entries.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                return Ok(0);
            }
            return Err(err);
        }
        Ok(n as usize)
    }
}

// ---- sockets --------------------------------------------------------------------------------

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in6.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn set_int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: `value` lives for the duration of the call; failures only lose an optimisation.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// A non-blocking TCP socket with Nagle off, connecting to `addr`. Returns the
/// socket and whether the connection is still in progress (wait for writability).
pub fn connect(addr: &SocketAddr) -> io::Result<(OwnedFd, bool)> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain syscall; on success we own the returned descriptor.
    let raw = cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `raw` was just returned by socket() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_int_opt(raw, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid address of length `len`.
    let rc = unsafe { libc::connect(raw, &storage as *const _ as *const libc::sockaddr, len) };
    if rc == 0 {
        return Ok((fd, false));
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok((fd, true))
    } else {
        Err(err)
    }
}

/// The pending error of a socket (the outcome of a non-blocking connect).
pub fn take_socket_error(fd: RawFd) -> io::Result<()> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for writing.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut value as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    })?;
    if value == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(value))
    }
}

/// A listening, non-blocking TCP socket on `addr` (port 0 picks a free port).
pub fn listen(addr: &SocketAddr, backlog: i32) -> io::Result<(OwnedFd, SocketAddr)> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain syscall; on success we own the returned descriptor.
    let raw = cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `raw` was just returned by socket().
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_int_opt(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid address of length `len`.
    cvt(unsafe { libc::bind(raw, &storage as *const _ as *const libc::sockaddr, len) })?;
    // SAFETY: plain syscall on a socket we own.
    cvt(unsafe { libc::listen(raw, backlog) })?;
    let local = local_addr(raw)?;
    Ok((fd, local))
}

fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    // SAFETY: zeroed storage is valid; getsockname writes at most `len` bytes.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    cvt(unsafe { libc::getsockname(fd, &mut storage as *mut _ as *mut libc::sockaddr, &mut len) })?;
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in.
            let sin = unsafe { &*(&storage as *const _ as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Ok(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6.
            let sin6 = unsafe { &*(&storage as *const _ as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddr::new(ip.into(), u16::from_be(sin6.sin6_port)))
        }
        _ => Err(io::Error::other("unknown address family")),
    }
}

/// Accepts one connection (non-blocking, Nagle off); `Ok(None)` when none is waiting.
pub fn accept(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: null address pointers are allowed by accept4.
    let raw = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if raw < 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(err),
        };
    }
    set_int_opt(raw, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    // SAFETY: `raw` was just returned by accept4.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(raw) }))
}

/// Outcome of a non-blocking read or write.
#[derive(Debug)]
pub enum Io {
    /// This many bytes moved (0 on read: the peer closed).
    Done(usize),
    /// Nothing can move now; wait for readiness.
    WouldBlock,
}

/// Reads into `buf`.
#[inline]
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<Io> {
    loop {
        // SAFETY: `buf` is valid for writing `buf.len()` bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n >= 0 {
            return Ok(Io::Done(n as usize));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(Io::WouldBlock),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

/// Writes `buf` (without SIGPIPE on a closed peer).
#[inline]
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<Io> {
    loop {
        // SAFETY: `buf` is valid for reading `buf.len()` bytes.
        let n = unsafe {
            libc::send(
                fd,
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(Io::Done(n as usize));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(Io::WouldBlock),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_advances_and_matches_std() {
        let a = mono_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = mono_ns();
        assert!(b - a >= 2_000_000, "{a} {b}");
    }

    #[test]
    fn thread_cpu_grows_when_busy() {
        let a = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > a);
    }

    #[test]
    fn poller_times_out_with_sub_millisecond_precision() {
        // As the engine's timed threads run: in the real-time class where permitted, so that
        // a busy machine (a CPU hog, the other tests' threads) cannot make the wake-up late.
        let _guard = crate::loadgen::priority::PriorityGuard::raise(
            crate::loadgen::config::Priority::Realtime,
            true,
        );
        tighten_timer_slack();
        let p = Poller::new().unwrap();
        let mut evs = [empty_event(); 4];
        let mut worst = 0;
        for _ in 0..20 {
            let t0 = mono_ns();
            let n = p.wait(&mut evs, Some(300_000)).unwrap();
            let dt = mono_ns() - t0;
            assert_eq!(n, 0);
            assert!(dt >= 300_000, "woke early: {dt} ns");
            worst = worst.max(dt - 300_000);
        }
        // Generous bound for a shared machine; typical overshoot is ~60 µs.
        assert!(worst < 5_000_000, "overshoot {worst} ns");
    }

    #[test]
    fn connect_refused_is_an_error() {
        let (l, addr) = listen(&"127.0.0.1:0".parse().unwrap(), 8).unwrap();
        drop(l);
        match connect(&addr) {
            Err(_) => {}
            Ok((fd, pending)) => {
                assert!(pending);
                let p = Poller::new().unwrap();
                p.add(fd.as_raw_fd(), 1, WRITE).unwrap();
                let mut evs = [empty_event(); 1];
                p.wait(&mut evs, Some(1_000_000_000)).unwrap();
                assert!(take_socket_error(fd.as_raw_fd()).is_err());
            }
        }
    }
}
