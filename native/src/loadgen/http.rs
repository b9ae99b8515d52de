//! Incremental HTTP/1.1 response parsing (client side) and request-head parsing (test server).
//!
//! Design: the engine reads every socket into one buffer per thread and feeds
//! the bytes here, so a connection owns no buffer at all unless a response head
//! arrives split over several reads (then only the head is copied). Bodies are
//! counted, never stored: content-length, chunked and read-until-close bodies
//! are all walked by a small state machine. Heads are parsed with `httparse`.

/// Largest response or request head accepted (bytes).
pub const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 64;

/// What a fed slice amounted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// The response is not complete yet; every byte was consumed.
    More,
    /// The response ended after `consumed` bytes of the slice.
    Done { consumed: usize },
    /// The bytes are not a valid HTTP/1.x response.
    Invalid(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading the hex size; `digits` seen so far; `ext` inside a chunk extension.
    Size {
        value: u64,
        digits: u8,
        ext: bool,
    },
    /// Expecting the LF that ends the size line.
    SizeLf {
        value: u64,
    },
    /// Inside chunk data.
    Data(u64),
    /// Expecting CR then LF after chunk data.
    DataCr,
    DataLf,
    /// Trailer section: `len` bytes into the current line, `cr` just seen.
    Trailer {
        len: usize,
        cr: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// A response being received on one connection.
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    head: Vec<u8>,
    no_body: bool,
    /// Status code of the final response (0 until the head is parsed).
    pub status: u16,
    /// Whether the connection must be closed after this response.
    pub close: bool,
    /// Bytes received for this response (head and body).
    pub bytes: u64,
}

impl Default for ResponseParser {
    fn default() -> Self {
        ResponseParser {
            state: State::Done,
            head: Vec::new(),
            no_body: false,
            status: 0,
            close: false,
            bytes: 0,
        }
    }
}

fn header_is(name: &str, want: &str) -> bool {
    name.eq_ignore_ascii_case(want)
}

fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

fn parse_decimal(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |acc, &d| acc * 10 + (d - b'0') as u64))
}

impl ResponseParser {
    /// Prepares for the response to a new request (`head_request`: the request
    /// was HEAD, so the response has no body whatever its headers say).
    pub fn begin(&mut self, head_request: bool) {
        self.state = State::Head;
        self.head.clear();
        if self.head.capacity() > 4096 {
            self.head = Vec::new(); // do not keep a large buffer per idle connection
        }
        self.no_body = head_request;
        self.status = 0;
        self.close = false;
        self.bytes = 0;
    }

    /// Whether any byte of the response has arrived.
    pub fn started(&self) -> bool {
        self.bytes > 0
    }

    /// Feeds bytes read from the socket.
    pub fn feed(&mut self, data: &[u8]) -> Feed {
        let mut pos = 0;
        loop {
            match self.state {
                State::Head => {
                    let (used, invalid) = self.feed_head(&data[pos..]);
                    pos += used;
                    self.bytes += used as u64;
                    if let Some(f) = invalid {
                        return f;
                    }
                    if self.state == State::Head {
                        return Feed::More;
                    }
                }
                State::Length(rem) => {
                    let avail = (data.len() - pos) as u64;
                    let take = rem.min(avail);
                    pos += take as usize;
                    self.bytes += take;
                    if take == rem {
                        self.state = State::Done;
                    } else {
                        self.state = State::Length(rem - take);
                        return Feed::More;
                    }
                }
                State::Chunked(c) => {
                    let start = pos;
                    let r = self.feed_chunked(c, data, &mut pos);
                    self.bytes += (pos - start) as u64;
                    match r {
                        Ok(true) => self.state = State::Done,
                        Ok(false) => return Feed::More,
                        Err(e) => return Feed::Invalid(e),
                    }
                }
                State::UntilClose => {
                    self.bytes += (data.len() - pos) as u64;
                    return Feed::More;
                }
                State::Done => return Feed::Done { consumed: pos },
            }
        }
    }

    /// The peer closed the connection: completes a read-until-close body.
    pub fn eof(&mut self) -> Feed {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Feed::Done { consumed: 0 }
            }
            _ => Feed::Invalid("connection closed before the response was complete"),
        }
    }

    /// Parses as much of the head as `data` allows; returns bytes used of `data`.
    fn feed_head(&mut self, data: &[u8]) -> (usize, Option<Feed>) {
        let prior = self.head.len();
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let parsed = if prior == 0 {
            resp.parse(data)
        } else {
            self.head.extend_from_slice(data);
            resp.parse(&self.head)
        };
        let head_len = match parsed {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if prior == 0 {
                    self.head.extend_from_slice(data);
                }
                if self.head.len() > MAX_HEAD {
                    return (data.len(), Some(Feed::Invalid("response head too large")));
                }
                return (data.len(), None);
            }
            Err(_) => return (data.len(), Some(Feed::Invalid("malformed response head"))),
        };
        let used = head_len - prior;
        let status = resp.code.unwrap_or(0);
        let version = resp.version.unwrap_or(1);
        let mut length = None;
        let mut chunked = false;
        let mut close = version == 0;
        for h in resp.headers.iter() {
            if header_is(h.name, "content-length") {
                match parse_decimal(h.value) {
                    Some(n) => length = Some(n),
                    None => return (used, Some(Feed::Invalid("bad content-length"))),
                }
            } else if header_is(h.name, "transfer-encoding") {
                chunked = has_token(h.value, "chunked");
            } else if header_is(h.name, "connection") {
                if has_token(h.value, "close") {
                    close = true;
                } else if has_token(h.value, "keep-alive") {
                    close = false;
                }
            }
        }
        self.head.clear();
        if (100..200).contains(&status) && status != 101 {
            // Interim response (100 Continue, 103 Early Hints): the final one follows.
            return self.feed_head(&data[used..]).map_used(used);
        }
        self.status = status;
        self.close = close;
        self.state = if self.no_body || status == 204 || status == 304 {
            State::Done
        } else if chunked {
            State::Chunked(Chunk::Size {
                value: 0,
                digits: 0,
                ext: false,
            })
        } else if let Some(n) = length {
            if n == 0 {
                State::Done
            } else {
                State::Length(n)
            }
        } else {
            self.close = true;
            State::UntilClose
        };
        (used, None)
    }

    /// Walks chunked framing; `Ok(true)` when the last chunk and trailers are done.
    fn feed_chunked(
        &mut self,
        mut c: Chunk,
        data: &[u8],
        pos: &mut usize,
    ) -> Result<bool, &'static str> {
        while *pos < data.len() {
            let b = data[*pos];
            match c {
                Chunk::Size { value, digits, ext } => {
                    *pos += 1;
                    if b == b'\r' {
                        if digits == 0 {
                            return Err("chunk size missing");
                        }
                        c = Chunk::SizeLf { value };
                    } else if ext {
                        continue;
                    } else if b == b';' || b == b' ' || b == b'\t' {
                        c = Chunk::Size {
                            value,
                            digits,
                            ext: true,
                        };
                    } else {
                        let d = (b as char).to_digit(16).ok_or("bad chunk size")? as u64;
                        if digits >= 15 {
                            return Err("chunk size too large");
                        }
                        c = Chunk::Size {
                            value: value * 16 + d,
                            digits: digits + 1,
                            ext,
                        };
                    }
                }
                Chunk::SizeLf { value } => {
                    *pos += 1;
                    if b != b'\n' {
                        return Err("bad chunk size line");
                    }
                    c = if value == 0 {
                        Chunk::Trailer { len: 0, cr: false }
                    } else {
                        Chunk::Data(value)
                    };
                }
                Chunk::Data(rem) => {
                    let avail = (data.len() - *pos) as u64;
                    let take = rem.min(avail);
                    *pos += take as usize;
                    c = if take == rem {
                        Chunk::DataCr
                    } else {
                        Chunk::Data(rem - take)
                    };
                }
                Chunk::DataCr => {
                    *pos += 1;
                    if b != b'\r' {
                        return Err("missing CRLF after chunk data");
                    }
                    c = Chunk::DataLf;
                }
                Chunk::DataLf => {
                    *pos += 1;
                    if b != b'\n' {
                        return Err("missing CRLF after chunk data");
                    }
                    c = Chunk::Size {
                        value: 0,
                        digits: 0,
                        ext: false,
                    };
                }
                Chunk::Trailer { len, cr } => {
                    *pos += 1;
                    if cr {
                        if b != b'\n' {
                            return Err("bad trailer line");
                        }
                        if len == 0 {
                            return Ok(true);
                        }
                        c = Chunk::Trailer { len: 0, cr: false };
                    } else if b == b'\r' {
                        c = Chunk::Trailer { len, cr: true };
                    } else {
                        if len > MAX_HEAD {
                            return Err("trailer too large");
                        }
                        c = Chunk::Trailer {
                            len: len + 1,
                            cr: false,
                        };
                    }
                }
            }
        }
        self.state = State::Chunked(c);
        Ok(false)
    }
}

trait MapUsed {
    fn map_used(self, extra: usize) -> Self;
}

impl MapUsed for (usize, Option<Feed>) {
    fn map_used(self, extra: usize) -> Self {
        (self.0 + extra, self.1)
    }
}

/// A parsed request head (test server side).
#[derive(Debug, Clone, Default)]
pub struct RequestHead {
    /// Bytes of the head.
    pub head_len: usize,
    /// Value of Content-Length (0 if absent).
    pub body_len: u64,
    /// The request target (path and query).
    pub target: String,
    /// The X-Request-Id header, if any.
    pub request_id: Option<String>,
    /// Whether the client asked to close the connection after the response.
    pub close: bool,
    /// Whether the method was HEAD.
    pub head_method: bool,
}

/// Parses a request head at the start of `data`: `Ok(None)` if incomplete.
pub fn parse_request(data: &[u8]) -> Result<Option<RequestHead>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let n = match req.parse(data) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if data.len() > MAX_HEAD {
                Err("request head too large")
            } else {
                Ok(None)
            }
        }
        Err(_) => return Err("malformed request head"),
    };
    let mut out = RequestHead {
        head_len: n,
        target: req.path.unwrap_or("/").to_string(),
        close: req.version == Some(0),
        head_method: req.method == Some("HEAD"),
        ..RequestHead::default()
    };
    for h in req.headers.iter() {
        if header_is(h.name, "content-length") {
            out.body_len = parse_decimal(h.value).ok_or("bad content-length")?;
        } else if header_is(h.name, "x-request-id") {
            out.request_id = Some(String::from_utf8_lossy(h.value).into_owned());
        } else if header_is(h.name, "connection") && has_token(h.value, "close") {
            out.close = true;
        } else if header_is(h.name, "transfer-encoding") {
            return Err("chunked request bodies are not supported by the test server");
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(p: &mut ResponseParser, parts: &[&[u8]]) -> Feed {
        let mut last = Feed::More;
        for part in parts {
            last = p.feed(part);
            if last != Feed::More {
                break;
            }
        }
        last
    }

    #[test]
    fn content_length_response_in_one_read() {
        let mut p = ResponseParser::default();
        p.begin(false);
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(p.feed(r), Feed::Done { consumed: r.len() });
        assert_eq!(p.status, 200);
        assert!(!p.close);
        assert_eq!(p.bytes, r.len() as u64);
    }

    #[test]
    fn every_split_point_gives_the_same_result() {
        let r: &[u8] =
            b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 11\r\n\r\nhello world";
        for cut in 0..=r.len() {
            for cut2 in cut..=r.len() {
                let mut p = ResponseParser::default();
                p.begin(false);
                let f = feed_all(&mut p, &[&r[..cut], &r[cut..cut2], &r[cut2..]]);
                assert!(matches!(f, Feed::Done { .. }), "cut {cut}/{cut2}: {f:?}");
                assert_eq!(p.status, 404);
                assert!(p.close);
                assert_eq!(p.bytes, r.len() as u64, "cut {cut}/{cut2}");
            }
        }
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers_at_every_split() {
        let r: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
5;name=x\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n";
        for cut in 0..=r.len() {
            let mut p = ResponseParser::default();
            p.begin(false);
            let f = feed_all(&mut p, &[&r[..cut], &r[cut..]]);
            assert!(matches!(f, Feed::Done { .. }), "cut {cut}: {f:?}");
            assert_eq!(p.bytes, r.len() as u64);
        }
    }

    #[test]
    fn head_and_no_content_responses_have_no_body() {
        let mut p = ResponseParser::default();
        p.begin(true);
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
        assert_eq!(p.feed(r), Feed::Done { consumed: r.len() });
        p.begin(false);
        let r = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(p.feed(r), Feed::Done { consumed: r.len() });
    }

    #[test]
    fn interim_100_continue_is_skipped() {
        let mut p = ResponseParser::default();
        p.begin(false);
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(p.feed(r), Feed::Done { consumed: r.len() });
        assert_eq!(p.status, 201);
        assert_eq!(p.bytes, r.len() as u64);
    }

    #[test]
    fn body_until_close_ends_at_eof() {
        let mut p = ResponseParser::default();
        p.begin(false);
        assert_eq!(p.feed(b"HTTP/1.0 200 OK\r\n\r\nabc"), Feed::More);
        assert!(p.close);
        assert_eq!(p.eof(), Feed::Done { consumed: 0 });
        let mut q = ResponseParser::default();
        q.begin(false);
        assert_eq!(
            q.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab"),
            Feed::More
        );
        assert!(matches!(q.eof(), Feed::Invalid(_)));
    }

    #[test]
    fn garbage_is_invalid() {
        let mut p = ResponseParser::default();
        p.begin(false);
        assert!(matches!(
            p.feed(b"NOT HTTP AT ALL\r\n\r\n"),
            Feed::Invalid(_)
        ));
        p.begin(false);
        assert!(matches!(
            p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
            Feed::Invalid(_)
        ));
        p.begin(false);
        assert!(matches!(
            p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            Feed::Invalid(_)
        ));
    }

    #[test]
    fn request_heads_are_parsed() {
        let r = b"GET /x?delay_ms=3 HTTP/1.1\r\nHost: a\r\nX-Request-Id: r-17\r\n\
Content-Length: 4\r\nConnection: close\r\n\r\nbody";
        let h = parse_request(r).unwrap().unwrap();
        assert_eq!(h.target, "/x?delay_ms=3");
        assert_eq!(h.request_id.as_deref(), Some("r-17"));
        assert_eq!(h.body_len, 4);
        assert!(h.close);
        assert_eq!(h.head_len, r.len() - 4);
        assert!(parse_request(b"GET / HTTP/1.1\r\nHost:").unwrap().is_none());
    }
}
