//! A netfilter queue (NFQUEUE) over a raw netlink socket: bind queues, read the ids of the
//! packets the kernel holds for us, and give each its verdict, in any order and at any time.
//!
//! Only packet metadata is copied (`NFQNL_COPY_META`): which link a packet belongs to is known
//! from its queue number (one iptables rule per link sends it there), so no payload crosses
//! to user space. The socket is non-blocking for the event loop; this file is the only
//! `unsafe` of the emulator.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;
const NFQNL_COPY_META: u8 = 1;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const SOL_NETLINK: i32 = 270;
const NETLINK_NO_ENOBUFS: i32 = 5;
const NETLINK_NETFILTER: i32 = 12;

/// A verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Drop = 0,
    Accept = 1,
}

/// A packet the kernel queued: its queue and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub queue: u16,
    pub id: u32,
}

pub struct NfQueue {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
    msg: Vec<u8>,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

impl NfQueue {
    /// A netlink socket bound to ``queues`` (each holding up to ``max_len`` packets).
    pub fn open(queues: &[u16], max_len: u32) -> io::Result<NfQueue> {
        // SAFETY: plain socket calls on a descriptor this function owns.
        let fd = unsafe {
            let raw = libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            );
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(raw)
        };
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: addr is a valid sockaddr_nl of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        setsockopt(fd.as_raw_fd(), SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)?;
        // room for bursts (root may exceed rmem_max); ignore if refused
        let _ = setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            8 << 20,
        );
        let mut q = NfQueue {
            fd,
            seq: 0,
            buf: vec![0; 1 << 16],
            msg: Vec::with_capacity(64),
        };
        for &queue in queues {
            q.config(queue, |m| {
                attr(m, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0])
            })?;
            q.config(queue, |m| {
                let mut p = 0u32.to_be_bytes().to_vec(); // copy range: no payload
                p.push(NFQNL_COPY_META);
                attr(m, NFQA_CFG_PARAMS, &p);
            })?;
            q.config(queue, |m| {
                attr(m, NFQA_CFG_QUEUE_MAXLEN, &max_len.to_be_bytes())
            })?;
            // a full queue lets packets through rather than dropping them (emulated loss only)
            q.config(queue, |m| {
                attr(m, NFQA_CFG_FLAGS, &NFQA_CFG_F_FAIL_OPEN.to_be_bytes());
                attr(m, NFQA_CFG_MASK, &NFQA_CFG_F_FAIL_OPEN.to_be_bytes());
            })?;
        }
        set_nonblocking(q.fd.as_raw_fd())?;
        Ok(q)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn header(&mut self, kind: u16, flags: u16, queue: u16) {
        self.seq = self.seq.wrapping_add(1);
        self.msg.clear();
        self.msg.extend_from_slice(&0u32.to_ne_bytes()); // length, set in send()
        self.msg
            .extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | kind).to_ne_bytes());
        self.msg
            .extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        self.msg.extend_from_slice(&self.seq.to_ne_bytes());
        self.msg.extend_from_slice(&0u32.to_ne_bytes());
        // nfgenmsg: AF_UNSPEC, NFNETLINK_V0, the queue (big endian)
        self.msg.extend_from_slice(&[0, 0]);
        self.msg.extend_from_slice(&queue.to_be_bytes());
    }

    fn send(&mut self) -> io::Result<()> {
        let len = self.msg.len() as u32;
        self.msg[..4].copy_from_slice(&len.to_ne_bytes());
        loop {
            // SAFETY: msg is a valid buffer of len bytes; the kernel is the default destination.
            let n = unsafe {
                libc::send(
                    self.fd.as_raw_fd(),
                    self.msg.as_ptr().cast(),
                    self.msg.len(),
                    0,
                )
            };
            if n >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => wait_writable(self.fd.as_raw_fd())?,
                _ => return Err(err),
            }
        }
    }

    /// Send a configuration message for ``queue`` and wait for the kernel's acknowledgement.
    fn config(&mut self, queue: u16, attrs: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        self.header(NFQNL_MSG_CONFIG, NLM_F_ACK, queue);
        attrs(&mut self.msg);
        self.send()?;
        let seq = self.seq;
        loop {
            // the socket is still blocking here
            let n = self.recv_raw()?;
            for m in messages(&self.buf[..n]) {
                if m.kind == NLMSG_ERROR && m.seq == seq && m.body.len() >= 4 {
                    let code = i32::from_ne_bytes(m.body[0..4].try_into().unwrap());
                    return if code == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-code))
                    };
                }
            }
        }
    }

    /// The packets waiting, appended to ``out`` (none: WouldBlock was reached at once).
    pub fn recv(&mut self, out: &mut Vec<Held>) -> io::Result<()> {
        loop {
            match self.recv_raw() {
                Ok(n) => parse_packets(&self.buf[..n], out),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) => return Err(err),
            }
        }
    }

    /// One datagram into ``buf``, retried when a signal interrupts; its length.
    fn recv_raw(&mut self) -> io::Result<usize> {
        loop {
            // SAFETY: buf is a valid writable buffer of buf.len() bytes.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Give ``held`` its verdict.
    pub fn verdict(&mut self, held: Held, verdict: Verdict) -> io::Result<()> {
        self.header(NFQNL_MSG_VERDICT, 0, held.queue);
        let mut v = (verdict as u32).to_be_bytes().to_vec();
        v.extend_from_slice(&held.id.to_be_bytes());
        attr(&mut self.msg, NFQA_VERDICT_HDR, &v);
        self.send()
    }

    /// Unbind ``queues`` (the kernel does it too when the socket closes).
    pub fn unbind(&mut self, queues: &[u16]) {
        for &queue in queues {
            self.header(NFQNL_MSG_CONFIG, 0, queue);
            attr(
                &mut self.msg,
                NFQA_CFG_CMD,
                &[NFQNL_CFG_CMD_UNBIND, 0, 0, 0],
            );
            let _ = self.send();
        }
    }
}

fn attr(msg: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    msg.extend_from_slice(&(len as u16).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(payload);
    msg.resize(align4(msg.len()), 0);
}

/// One netlink message of a datagram: its type, sequence number and what follows its header.
struct Message<'a> {
    kind: u16,
    seq: u32,
    body: &'a [u8],
}

/// The netlink messages of a datagram, in order; a truncated or malformed one ends the walk.
fn messages(data: &[u8]) -> impl Iterator<Item = Message<'_>> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let b = data.get(off..)?;
        if b.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize;
        if len < 16 || len > b.len() {
            return None;
        }
        off += align4(len);
        Some(Message {
            kind: u16::from_ne_bytes(b[4..6].try_into().unwrap()),
            seq: u32::from_ne_bytes(b[8..12].try_into().unwrap()),
            body: &b[16..len],
        })
    })
}

/// The packet ids in a datagram of netlink messages (others are skipped).
pub fn parse_packets(data: &[u8], out: &mut Vec<Held>) {
    for m in messages(data) {
        // nfgenmsg (family, version, queue in big endian), then the attributes
        if m.kind != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET || m.body.len() < 4 {
            continue;
        }
        let queue = u16::from_be_bytes(m.body[2..4].try_into().unwrap());
        let attrs = &m.body[4..];
        let mut a = 0usize;
        while a + 4 <= attrs.len() {
            let alen = u16::from_ne_bytes(attrs[a..a + 2].try_into().unwrap()) as usize;
            let akind = u16::from_ne_bytes(attrs[a + 2..a + 4].try_into().unwrap()) & 0x7fff;
            if alen < 4 || a + alen > attrs.len() {
                break;
            }
            if akind == NFQA_PACKET_HDR && alen >= 8 {
                let id = u32::from_be_bytes(attrs[a + 4..a + 8].try_into().unwrap());
                out.push(Held { queue, id });
                break;
            }
            a += align4(alen);
        }
    }
}

fn setsockopt(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: value is a valid int for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an owned descriptor.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn wait_writable(fd: RawFd) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut p, 1, 100) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_messages_are_parsed_for_their_queue_and_id() {
        // two packet messages in one datagram: queue 7 id 42, queue 9 id 43
        let mut data = Vec::new();
        for (queue, id) in [(7u16, 42u32), (9, 43)] {
            let mut m = Vec::new();
            m.extend_from_slice(&0u32.to_ne_bytes());
            m.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET).to_ne_bytes());
            m.extend_from_slice(&[0; 10]);
            m.extend_from_slice(&[2, 0]);
            m.extend_from_slice(&queue.to_be_bytes());
            let mut hdr = id.to_be_bytes().to_vec();
            hdr.extend_from_slice(&[8, 0, 3]);
            attr(&mut m, 9, &[1, 2, 3, 4, 5]); // an attribute before the header
            attr(&mut m, NFQA_PACKET_HDR, &hdr);
            let len = m.len() as u32;
            m[..4].copy_from_slice(&len.to_ne_bytes());
            data.extend_from_slice(&m);
        }
        let mut out = Vec::new();
        parse_packets(&data, &mut out);
        assert_eq!(
            out,
            vec![Held { queue: 7, id: 42 }, Held { queue: 9, id: 43 }]
        );
        parse_packets(&data[..25], &mut out); // truncated: nothing more
        assert_eq!(out.len(), 2);
    }
}
